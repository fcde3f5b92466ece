// MarkMalformed, MarkRefused and MalformedRequestStatus (see
// malformed_request.h): the mark is an unknown length-delimited field,
// number kMarkField holding the method's name or kRefusedField holding the
// reason; no refit message uses those numbers.
#include "server/malformed_request.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/unknown_field_set.h"

namespace refit {
namespace {

constexpr int kMarkField = 536870911;  // the largest field number protobuf allows
constexpr int kRefusedField = 536870910;

}  // namespace

void MarkMalformed(google::protobuf::Message* request, absl::string_view method) {
  request->Clear();
  request->GetReflection()->MutableUnknownFields(request)->AddLengthDelimited(
      kMarkField, std::string(method));
}

void MarkRefused(google::protobuf::Message* request, absl::string_view reason) {
  request->Clear();
  request->GetReflection()->MutableUnknownFields(request)->AddLengthDelimited(
      kRefusedField, std::string(reason));
}

absl::Status MalformedRequestStatus(const google::protobuf::Message& request) {
  const google::protobuf::UnknownFieldSet& unknown =
      request.GetReflection()->GetUnknownFields(request);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& f = unknown.field(i);
    if (f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    if (f.number() == kRefusedField) return absl::InvalidArgumentError(f.length_delimited());
    if (f.number() != kMarkField) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        f.length_delimited(), ": the request is not a valid ",
        request.GetDescriptor()->full_name(), " (malformed protobuf)"));
  }
  return absl::OkStatus();
}

}  // namespace refit
