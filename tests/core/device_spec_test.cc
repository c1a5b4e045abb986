#include <chorus/core/device_spec.h>

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include <chorus/core/error.h>

namespace chorus {
namespace {

DeviceSpec make(std::optional<std::string> job, std::optional<int> replica, std::optional<int> task,
                std::optional<std::string> type, std::optional<int> index, bool physical = false) {
  DeviceSpec s;
  s.job = std::move(job);
  s.replica = replica;
  s.task = task;
  s.type = std::move(type);
  s.index = index;
  s.physical = physical;
  return s;
}

struct Form {
  const char* text;
  DeviceSpec want;
  const char* printed;  // to_string() of the parsed spec
};

// Every form TensorFlow documents, with the fields it names.
const Form kForms[] = {
    {"/cpu:0", make({}, {}, {}, "CPU", 0), "/device:CPU:0"},
    {"/GPU:1", make({}, {}, {}, "GPU", 1), "/device:GPU:1"},
    {"GPU:0", make({}, {}, {}, "GPU", 0), "/device:GPU:0"},
    {"gpu", make({}, {}, {}, "GPU", {}), "/device:GPU:*"},
    {"CPU", make({}, {}, {}, "CPU", {}), "/device:CPU:*"},
    {"/Gpu:3", make({}, {}, {}, "GPU", 3), "/device:GPU:3"},
    {"/device:GPU:0", make({}, {}, {}, "GPU", 0), "/device:GPU:0"},
    {"/device:gpu:0", make({}, {}, {}, "GPU", 0), "/device:GPU:0"},
    {"device:CPU:2", make({}, {}, {}, "CPU", 2), "/device:CPU:2"},
    {"/device:GPU", make({}, {}, {}, "GPU", {}), "/device:GPU:*"},
    {"/device:GPU:*", make({}, {}, {}, "GPU", {}), "/device:GPU:*"},
    {"/gpu:*", make({}, {}, {}, "GPU", {}), "/device:GPU:*"},
    {"/job:localhost/replica:0/task:0/device:GPU:0", make("localhost", 0, 0, "GPU", 0),
     "/job:localhost/replica:0/task:0/device:GPU:0"},
    {"/job:localhost/replica:0/task:0/device:CPU:0", make("localhost", 0, 0, "CPU", 0),
     "/job:localhost/replica:0/task:0/device:CPU:0"},
    {"/job:worker/task:1/gpu:2", make("worker", {}, 1, "GPU", 2), "/job:worker/task:1/device:GPU:2"},
    {"/job:worker/replica:0/task:1/device:GPU:0", make("worker", 0, 1, "GPU", 0),
     "/job:worker/replica:0/task:1/device:GPU:0"},
    {"job:ps_2/task:3", make("ps_2", {}, 3, {}, {}), "/job:ps_2/task:3"},
    {"/task:1/job:worker", make("worker", {}, 1, {}, {}), "/job:worker/task:1"},  // any order
    {"/job:*/replica:*/task:*/device:*:*", make({}, {}, {}, {}, {}), ""},
    {"/replica:2", make({}, 2, {}, {}, {}), "/replica:2"},
    {"/physical_device:GPU:0", make({}, {}, {}, "GPU", 0, true), "/physical_device:GPU:0"},
    {"/physical_device:cpu:0", make({}, {}, {}, "CPU", 0, true), "/physical_device:CPU:0"},
    {"physical_device:GPU", make({}, {}, {}, "GPU", {}, true), "/physical_device:GPU:*"},
    {"/gpu:2147483647", make({}, {}, {}, "GPU", 2147483647), "/device:GPU:2147483647"},
    {"/gpu:007", make({}, {}, {}, "GPU", 7), "/device:GPU:7"},
    {"", DeviceSpec{}, ""},
    {"/", DeviceSpec{}, ""},
};

TEST(DeviceSpecTest, ParsesEveryDocumentedForm) {
  for (const Form& f : kForms) {
    SCOPED_TRACE(f.text);
    const DeviceSpec s = DeviceSpec::parse(f.text);
    EXPECT_EQ(s.job, f.want.job);
    EXPECT_EQ(s.replica, f.want.replica);
    EXPECT_EQ(s.task, f.want.task);
    EXPECT_EQ(s.type, f.want.type);
    EXPECT_EQ(s.index, f.want.index);
    EXPECT_EQ(s.physical, f.want.physical);
    EXPECT_EQ(s.to_string(), f.printed);
    std::ostringstream os;
    os << s;
    EXPECT_EQ(os.str(), f.printed);
    // What to_string prints parses back to the same spec.
    EXPECT_EQ(DeviceSpec::parse(s.to_string()), s);
  }
}

TEST(DeviceSpecTest, EmptySpecHasNoFields) {
  const DeviceSpec s = DeviceSpec::parse("");
  EXPECT_FALSE(s.job || s.replica || s.task || s.type || s.index || s.physical);
  EXPECT_EQ(s, DeviceSpec{});
  EXPECT_EQ(s.to_string(), "");
}

// The message must quote the whole string and the offending part, and list the accepted forms.
void expect_rejected(const std::string& text, const std::string& bad_part, const std::string& also = "") {
  SCOPED_TRACE(text);
  try {
    const DeviceSpec s = DeviceSpec::parse(text);
    ADD_FAILURE() << "accepted as " << s;
  } catch (const InvalidArgumentError& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("'" + text + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("'" + bad_part + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("Accepted forms"), std::string::npos) << m;
    EXPECT_NE(m.find("/job:localhost/replica:0/task:0/device:GPU:0"), std::string::npos) << m;
    if (!also.empty()) {
      EXPECT_NE(m.find(also), std::string::npos) << m;
    }
  }
}

TEST(DeviceSpecTest, RejectsMalformedStrings) {
  expect_rejected("/gpu:-1", "gpu:-1", "'-1' is not an integer >= 0");
  expect_rejected("/gpu:x", "gpu:x", "'x' is not an integer");
  expect_rejected("/gpu:+1", "gpu:+1");
  expect_rejected("/gpu:1x", "gpu:1x");
  expect_rejected("/gpu:", "gpu:", "empty");
  expect_rejected("/gpux:0", "gpux:0", "CPU and GPU");
  expect_rejected("/job:", "job:", "empty");
  expect_rejected("/job:1abc", "job:1abc");
  expect_rejected("/job:a-b", "job:a-b");
  expect_rejected("/job", "job");
  expect_rejected("/job:a:b", "job:a:b");
  expect_rejected("/replica:a", "replica:a", "'a' is not an integer");
  expect_rejected("/task:-2", "task:-2");
  expect_rejected("/task:", "task:");
  expect_rejected("/gpu:0/gpu:1", "gpu:1", "twice");
  expect_rejected("/gpu:0/gpu:0", "gpu:0", "twice");
  expect_rejected("/device:GPU:0/cpu:0", "cpu:0", "twice");
  expect_rejected("/job:a/job:b", "job:b", "twice");
  expect_rejected("/task:0/task:1", "task:1", "twice");
  expect_rejected("device:GPU:0:1", "device:GPU:0:1");
  expect_rejected("gpu:0:1", "gpu:0:1");
  expect_rejected("/device", "device");
  expect_rejected("/device:", "device:", "empty");
  expect_rejected("/device:GPU:", "device:GPU:", "empty");
  expect_rejected("/physical_device:GPU/job:worker", "physical_device:GPU", "physical");
  expect_rejected("/job:localhost/replica:0/task:0/physical_device:GPU:0", "physical_device:GPU:0", "physical");
  expect_rejected("/physical_device:GPU:0/device:GPU:0", "device:GPU:0", "twice");
  expect_rejected("/gpu:99999999999", "gpu:99999999999", "out of range");
  expect_rejected("/gpu:2147483648", "gpu:2147483648", "out of range");
  expect_rejected("/replica:99999999999999999999999", "replica:99999999999999999999999", "out of range");
  expect_rejected("//gpu:0", "", "empty part");
  expect_rejected("/gpu:0/", "", "empty part");
  expect_rejected(" /gpu:0", " ");
  expect_rejected("/*:0", "*:0");
  expect_rejected("/JOB:worker", "JOB:worker");
}

TEST(DeviceSpecTest, OtherDeviceTypesSayWhatChorusHas) {
  expect_rejected("/device:TPU:0", "device:TPU:0", "chorus has CPU and GPU devices");
  expect_rejected("TPU:0", "TPU:0", "chorus has CPU and GPU devices");
  expect_rejected("/job:worker/tpu", "tpu", "chorus has CPU and GPU devices");
  expect_rejected("/device:XLA_GPU:0", "device:XLA_GPU:0", "chorus has CPU and GPU devices");
  expect_rejected("/physical_device:TPU:0", "physical_device:TPU:0", "chorus has CPU and GPU devices");
}

TEST(DeviceSpecTest, MatchesTreatsUnsetFieldsAsWildcards) {
  const DeviceSpec gpu0 = DeviceSpec::parse("/job:localhost/replica:0/task:0/device:GPU:0");
  EXPECT_TRUE(DeviceSpec::parse("").matches(gpu0));
  EXPECT_TRUE(DeviceSpec::parse("gpu").matches(gpu0));
  EXPECT_TRUE(DeviceSpec::parse("/GPU:0").matches(gpu0));
  EXPECT_TRUE(DeviceSpec::parse("/job:localhost").matches(gpu0));
  EXPECT_TRUE(DeviceSpec::parse("/task:0/gpu:*").matches(gpu0));
  EXPECT_TRUE(gpu0.matches(gpu0));
  EXPECT_FALSE(DeviceSpec::parse("/gpu:1").matches(gpu0));
  EXPECT_FALSE(DeviceSpec::parse("/cpu").matches(gpu0));
  EXPECT_FALSE(DeviceSpec::parse("/job:worker").matches(gpu0));
  EXPECT_FALSE(DeviceSpec::parse("/replica:1").matches(gpu0));
  EXPECT_FALSE(DeviceSpec::parse("/task:1").matches(gpu0));
  // A field set here but unset there does not match.
  EXPECT_FALSE(gpu0.matches(DeviceSpec::parse("gpu")));
  EXPECT_FALSE(DeviceSpec::parse("/gpu:0").matches(DeviceSpec::parse("gpu")));
  // Logical and physical names never match each other.
  const DeviceSpec phys = DeviceSpec::parse("/physical_device:GPU:0");
  EXPECT_FALSE(DeviceSpec::parse("/gpu:0").matches(phys));
  EXPECT_FALSE(phys.matches(DeviceSpec::parse("/gpu:0")));
  EXPECT_FALSE(DeviceSpec::parse("").matches(phys));
  EXPECT_TRUE(DeviceSpec::parse("/physical_device:GPU").matches(phys));
}

TEST(DeviceSpecTest, MergedWithFillsOnlyUnsetFields) {
  const DeviceSpec defaults = DeviceSpec::parse("/job:worker/replica:0/task:1/device:CPU:1");
  EXPECT_EQ(DeviceSpec::parse("/gpu:0").merged_with(defaults),
            DeviceSpec::parse("/job:worker/replica:0/task:1/device:GPU:0"));
  EXPECT_EQ(DeviceSpec::parse("").merged_with(defaults), defaults);
  EXPECT_EQ(defaults.merged_with(DeviceSpec::parse("/job:ps/gpu:3")), defaults);  // all set here
  EXPECT_EQ(DeviceSpec::parse("/task:7").merged_with(defaults),
            DeviceSpec::parse("/job:worker/replica:0/task:7/device:CPU:1"));
  // Field by field as TF's make_merged_spec: the unset index comes from the defaults.
  EXPECT_EQ(DeviceSpec::parse("gpu").merged_with(defaults).to_string(), "/job:worker/replica:0/task:1/device:GPU:1");
  EXPECT_EQ(DeviceSpec::parse("gpu").merged_with(DeviceSpec{}), DeviceSpec::parse("gpu"));
  EXPECT_TRUE(DeviceSpec::parse("gpu").merged_with(DeviceSpec::parse("/physical_device:GPU:0")).physical);
}

TEST(DeviceSpecTest, ToStringOfHandBuiltSpecs) {
  EXPECT_EQ(make("worker", 0, 1, "GPU", 0).to_string(), "/job:worker/replica:0/task:1/device:GPU:0");
  EXPECT_EQ(make({}, {}, {}, "CPU", {}).to_string(), "/device:CPU:*");
  EXPECT_EQ(make({}, {}, {}, {}, 3).to_string(), "/device:*:3");
  EXPECT_EQ(DeviceSpec::parse("/device:*:3"), make({}, {}, {}, {}, 3));
  EXPECT_EQ(make({}, {}, {}, {}, {}, true).to_string(), "/physical_device:*:*");
  EXPECT_EQ(DeviceSpec::parse("/physical_device:*:*"), make({}, {}, {}, {}, {}, true));
}

TEST(DeviceSpecTest, CanonicalNames) {
  EXPECT_EQ(canonical_logical_name("GPU", 0), "/job:localhost/replica:0/task:0/device:GPU:0");
  EXPECT_EQ(canonical_logical_name("CPU", 0), "/job:localhost/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(canonical_logical_name("gpu", 3, 2), "/job:localhost/replica:0/task:2/device:GPU:3");
  EXPECT_EQ(canonical_physical_name("GPU", 1), "/physical_device:GPU:1");
  EXPECT_EQ(canonical_physical_name("cpu", 0), "/physical_device:CPU:0");
  // Canonical names are themselves valid specs naming exactly that device.
  EXPECT_EQ(DeviceSpec::parse(canonical_logical_name("GPU", 3, 2)), make("localhost", 0, 2, "GPU", 3));
  EXPECT_EQ(DeviceSpec::parse(canonical_physical_name("GPU", 1)), make({}, {}, {}, "GPU", 1, true));
}

}  // namespace
}  // namespace chorus
