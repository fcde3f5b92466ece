// CheckRequestText (see request_text.h): a walk over the request's fields by
// reflection.
#include "server/request_text.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"

namespace refit {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Returns the length of the well-formed UTF-8 prefix of `text`.
size_t Utf8Prefix(absl::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t lo = 0x80, hi = 0xBF;  // bounds of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // no overlong forms
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return i;
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return n;
}

bool IsBinary(const FieldDescriptor& f) {
  return f.name() == "member_secret" || f.full_name() == "refit.v1.KvSetRequest.value" ||
         f.full_name() == "refit.v1.RegisterRequest.job_key";
}

absl::Status CheckValue(const std::string& path, const FieldDescriptor& f,
                        const std::string& value) {
  if (const size_t max = MaxTextBytes(f); value.size() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", value.size(), " bytes, over its limit of ", max));
  }
  const size_t ok = Utf8Prefix(value);
  if (ok == value.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(path, ": not UTF-8 (byte ", ok + 1,
                                                 " of ", value.size(), ")"));
}

absl::Status CheckMessage(const Message& m, const std::string& prefix) {
  const Reflection* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  std::string scratch;
  for (const FieldDescriptor* f : fields) {
    const std::string path = prefix.empty() ? f->name() : absl::StrCat(prefix, ".", f->name());
    const bool text = f->type() == FieldDescriptor::TYPE_STRING ||
                      (f->type() == FieldDescriptor::TYPE_BYTES && !IsBinary(*f));
    const bool message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (!text && !message) continue;
    const int count = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int i = 0; i < count; ++i) {
      const std::string at = f->is_repeated() ? absl::StrCat(path, "[", i, "]") : path;
      absl::Status s;
      if (message) {
        s = CheckMessage(f->is_repeated() ? r->GetRepeatedMessage(m, f, i)
                                          : r->GetMessage(m, f),
                         at);
      } else {
        s = CheckValue(at, *f, f->is_repeated() ? r->GetRepeatedStringReference(m, f, i, &scratch)
                                            : r->GetStringReference(m, f, &scratch));
      }
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

size_t MaxTextBytes(const FieldDescriptor& field) {
  const std::string& name = field.name();
  const std::string& full = field.full_name();
  if (name == "job" || name == "engine_id" || name == "device" || name == "device_uuid") {
    return 128;
  }
  if (name == "host_id" || name == "convention") return 256;
  if (name == "member_id") return 512;
  if (full == "refit.v1.LocalBuffer.name" || full == "refit.v1.DigestPart.tensor_name" ||
      name == "key") {
    return 1024;
  }
  if (full == "refit.v1.ReportRequest.reason") return 64 << 10;
  if (name == "model_config") return 1 << 20;
  return 4096;
}

bool IsUtf8(absl::string_view text) { return Utf8Prefix(text) == text.size(); }

absl::Status CheckRequestText(const Message& request) { return CheckMessage(request, ""); }

}  // namespace refit
