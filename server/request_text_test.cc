// CheckRequestText: UTF-8 text passes, anything else is named by its path.
#include "server/request_text.h"

#include "gtest/gtest.h"
#include "proto/refit_service.pb.h"

namespace refit {
namespace {

TEST(RequestTextTest, IsUtf8AcceptsWellFormedTextOnly) {
  EXPECT_TRUE(IsUtf8(""));
  EXPECT_TRUE(IsUtf8("engine-A rank 0"));
  EXPECT_TRUE(IsUtf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_TRUE(IsUtf8("\xf4\x8f\xbf\xbf"));                      // U+10FFFF
  EXPECT_FALSE(IsUtf8("\xff"));
  EXPECT_FALSE(IsUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsUtf8("\xe0\x80\xaf"));      // overlong
  EXPECT_FALSE(IsUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(IsUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsUtf8("ab\xc3"));            // cut short
  EXPECT_FALSE(IsUtf8("\xe2\x28\xa1"));      // a bad continuation byte
}

TEST(RequestTextTest, NamesTheFieldThatIsNotText) {
  v1::RegisterRequest req;
  v1::Registration* reg = req.mutable_registration();
  reg->mutable_identity()->set_job("job");
  reg->set_convention("megatron:tp=1");
  reg->add_buffers()->set_name("w0");
  reg->add_buffers()->set_name("w\xff");
  req.set_member_secret("\xff\xfe binary is fine here");
  absl::Status s = CheckRequestText(req);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), "registration.buffers[1].name: not UTF-8 (byte 2 of 2)");
  reg->mutable_buffers(1)->set_name("w1");
  EXPECT_TRUE(CheckRequestText(req).ok());
  reg->mutable_identity()->set_host_id("h\xc0");
  EXPECT_NE(CheckRequestText(req).message().find("registration.identity.host_id"),
            absl::string_view::npos);
}

TEST(RequestTextTest, KeyValueValuesAreBinaryButKeysAreText) {
  v1::KvSetRequest req;
  req.set_key("refit/v1/nccl");
  req.set_value(std::string("\x00\xff\xfe", 3));
  req.set_member_id("trainer/job/0");
  EXPECT_TRUE(CheckRequestText(req).ok());
  req.set_key("k\xff");
  EXPECT_EQ(CheckRequestText(req).message(), "key: not UTF-8 (byte 2 of 2)");
}

TEST(RequestTextTest, FieldsOverTheirLimitAreRefusedNamingFieldAndLimit) {
  v1::RegisterRequest req;
  v1::Registration* reg = req.mutable_registration();
  reg->mutable_identity()->set_host_id(std::string(256, 'h'));
  reg->add_buffers()->set_name(std::string(1024, 'b'));
  reg->set_model_config(std::string(1 << 20, ' '));
  EXPECT_TRUE(CheckRequestText(req).ok());
  reg->mutable_identity()->set_host_id(std::string(257, 'h'));
  EXPECT_EQ(CheckRequestText(req).message(),
            "registration.identity.host_id: 257 bytes, over its limit of 256");
  reg->mutable_identity()->set_host_id("h");
  reg->mutable_buffers(0)->set_name(std::string(1025, 'b'));
  EXPECT_EQ(CheckRequestText(req).code(), absl::StatusCode::kInvalidArgument);
  v1::ReportRequest report;
  report.set_reason(std::string(64 << 10, 'r'));
  EXPECT_TRUE(CheckRequestText(report).ok());
  report.set_reason(std::string((64 << 10) + 1, 'r'));
  EXPECT_EQ(CheckRequestText(report).message(), "reason: 65537 bytes, over its limit of 65536");
}

}  // namespace
}  // namespace refit
