// MarkMalformed and MalformedRequestStatus (see malformed_request.h): the
// mark is an unknown length-delimited field, number kMarkField, holding the
// method's name; no refit message uses that number.
#include "server/malformed_request.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/unknown_field_set.h"

namespace refit {
namespace {

constexpr int kMarkField = 536870911;  // the largest field number protobuf allows

}  // namespace

void MarkMalformed(google::protobuf::Message* request, absl::string_view method) {
  request->Clear();
  request->GetReflection()->MutableUnknownFields(request)->AddLengthDelimited(
      kMarkField, std::string(method));
}

absl::Status MalformedRequestStatus(const google::protobuf::Message& request) {
  const google::protobuf::UnknownFieldSet& unknown =
      request.GetReflection()->GetUnknownFields(request);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& f = unknown.field(i);
    if (f.number() != kMarkField ||
        f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        f.length_delimited(), ": the request is not a valid ",
        request.GetDescriptor()->full_name(), " (malformed protobuf)"));
  }
  return absl::OkStatus();
}

}  // namespace refit
