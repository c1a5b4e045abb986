// The reader against files written by TensorFlow 2 itself (../shared/testdata/tensorflow,
// README.md there): every CRC checked, every Event decoded, contents as described. The expected
// values were decoded independently from the raw bytes (a scratch Python struct parser, not
// this code); structural facts (header first, epoch scalars equal to the evaluation scalars of the
// same epoch) are checked as relations.
#include <chorus/summary/event_file_reader.h>

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "tests/summary/summary_test_util.h"
#include <chorus/core/error.h>
#include <chorus/summary/record.h>

namespace chorus::summary {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

TEST(EventFileReader, HeaderOnlyFileIsOneFileVersionEvent) {
  CHORUS_TF_TESTDATA_OR_SKIP(dir);
  const std::string path = dir + "/events.out.tfevents.header-only.v2";
  const std::vector<Event> events = read_events(path);
  ASSERT_EQ(events.size(), 1u);
  const Event& e = events[0];
  EXPECT_EQ(e.what, event_what::kFileVersion);
  EXPECT_EQ(e.file_version.value_or(""), "brain.Event:2");
  EXPECT_EQ(e.step, 0);
  // TF's C++ writer stamps the header with whole seconds; this one is from November 2023.
  EXPECT_EQ(e.wall_time, std::floor(e.wall_time));
  EXPECT_GT(e.wall_time, 1.7e9);
  EXPECT_LT(e.wall_time, 1.71e9);
  EXPECT_EQ(read_file(path).size(), 40u);
}

TEST(EventFileReader, OurHeaderRecordIsByteForByteTfsForTheSameTime) {
  // Re-encoding TF's header event with our encoder and framing gives TF's 40 bytes exactly.
  CHORUS_TF_TESTDATA_OR_SKIP(dir);
  const std::string path = dir + "/events.out.tfevents.header-only.v2";
  const Event tf = read_events(path).at(0);
  Event ours;
  ours.wall_time = tf.wall_time;
  ours.file_version = std::string(kFileVersion);
  EXPECT_EQ(frame_record(encode_event(ours)), read_file(path));
}

struct Expected {
  const char* tag;
  std::int64_t step;
  float value;
};

// Decoded independently from events.out.tfevents.validation.v2 (see the file comment).
constexpr Expected kValidation[] = {
    {"evaluation_det_loss_vs_iterations", 186, 1.0848240852355957f},
    {"evaluation_cls_loss_vs_iterations", 186, 0.57508385181427f},
    {"evaluation_box_loss_vs_iterations", 186, 0.010194804519414902f},
    {"evaluation_reg_l2_loss_vs_iterations", 186, 0.06370285153388977f},
    {"evaluation_loss_vs_iterations", 186, 1.148526906967163f},
    {"epoch_det_loss", 0, 1.0848240852355957f},
    {"epoch_cls_loss", 0, 0.57508385181427f},
    {"epoch_box_loss", 0, 0.010194804519414902f},
    {"epoch_reg_l2_loss", 0, 0.06370285153388977f},
    {"epoch_loss", 0, 1.148526906967163f},
    {"evaluation_det_loss_vs_iterations", 372, 0.9707645177841187f},
    {"evaluation_cls_loss_vs_iterations", 372, 0.44316673278808594f},
    {"evaluation_box_loss_vs_iterations", 372, 0.010551955550909042f},
    {"evaluation_reg_l2_loss_vs_iterations", 372, 0.06379692256450653f},
    {"evaluation_loss_vs_iterations", 372, 1.0345613956451416f},
    {"epoch_det_loss", 1, 0.9707645177841187f},
    {"epoch_cls_loss", 1, 0.44316673278808594f},
    {"epoch_box_loss", 1, 0.010551955550909042f},
    {"epoch_reg_l2_loss", 1, 0.06379692256450653f},
    {"epoch_loss", 1, 1.0345613956451416f},
};

TEST(EventFileReader, ValidationFileHoldsKerasScalarsAsRank0FloatTensors) {
  CHORUS_TF_TESTDATA_OR_SKIP(dir);
  const std::vector<Event> events = read_events(dir + "/events.out.tfevents.validation.v2");
  ASSERT_EQ(events.size(), 1 + std::size(kValidation));

  EXPECT_EQ(events[0].file_version.value_or(""), "brain.Event:2");
  double last_wall_time = events[0].wall_time;
  std::map<std::string, std::map<std::int64_t, float>> by_tag;
  for (std::size_t i = 1; i < events.size(); ++i) {
    const Event& e = events[i];
    const Expected& want = kValidation[i - 1];
    SCOPED_TRACE(want.tag);
    EXPECT_EQ(e.what, event_what::kSummary);
    EXPECT_GE(e.wall_time, last_wall_time) << "events are in time order";
    last_wall_time = e.wall_time;
    EXPECT_EQ(e.step, want.step);
    ASSERT_TRUE(e.summary.has_value());
    ASSERT_EQ(e.summary->value.size(), 1u);
    const SummaryValue& v = e.summary->value[0];
    EXPECT_EQ(v.tag, want.tag);
    // The TF2 scalar form (docs/formats.md A8.2): no simple_value; a rank-0 DT_FLOAT tensor with
    // 4 bytes of tensor_content; metadata with plugin "scalars", no content, no data class.
    EXPECT_FALSE(v.simple_value.has_value());
    ASSERT_TRUE(v.tensor.has_value());
    EXPECT_EQ(v.tensor->dtype, tf_dtype::kFloat);
    ASSERT_TRUE(v.tensor->shape.has_value());
    EXPECT_TRUE(v.tensor->shape->empty());
    EXPECT_EQ(v.tensor->tensor_content.size(), 4u);
    ASSERT_TRUE(v.metadata.has_value());
    EXPECT_EQ(v.plugin_name(), "scalars");
    EXPECT_TRUE(v.metadata->plugin_data.content.empty());
    EXPECT_EQ(v.metadata->data_class, DataClass::kUnknown);
    const std::vector<double> value = v.tensor->to_doubles();
    ASSERT_EQ(value.size(), 1u);
    EXPECT_EQ(static_cast<float>(value[0]), want.value);
    by_tag[v.tag][e.step] = static_cast<float>(value[0]);
  }
  // Keras logs each epoch's validation losses twice: per epoch and against the iteration count.
  EXPECT_EQ(by_tag.size(), 10u);
  for (const char* loss : {"det_loss", "cls_loss", "box_loss", "reg_l2_loss", "loss"}) {
    const auto& epoch = by_tag.at(std::string("epoch_") + loss);
    const auto& iter = by_tag.at(std::string("evaluation_") + loss + "_vs_iterations");
    EXPECT_EQ(epoch.at(0), iter.at(186)) << loss;
    EXPECT_EQ(epoch.at(1), iter.at(372)) << loss;
  }
}

TEST(EventFileReader, EveryRecordOfTheRealFilesPassesBothCrcChecks) {
  CHORUS_TF_TESTDATA_OR_SKIP(dir);
  for (const char* name : {"events.out.tfevents.header-only.v2", "events.out.tfevents.validation.v2"}) {
    const std::string path = dir + "/" + name;
    RecordReader r(path);
    std::string rec;
    int n = 0;
    while (r.read(rec)) ++n;
    EXPECT_EQ(r.offset(), read_file(path).size()) << name << ": every byte belongs to a record";
    EXPECT_GT(n, 0);
  }
}

TEST(EventFileReader, CorruptedCopyOfTheRealFileIsDataLossAtTheRightRecord) {
  CHORUS_TF_TESTDATA_OR_SKIP(dir);
  TempDir tmp;
  std::string bytes = read_file(dir + "/events.out.tfevents.validation.v2");
  // The second record starts at 40 (after the 40-byte header record); flip a byte of its tag.
  bytes[40 + 12 + 20] ^= 1;
  write_file(tmp.str("events.out.tfevents.bad"), bytes);
  EventFileReader reader(tmp.str("events.out.tfevents.bad"));
  ASSERT_TRUE(reader.next().has_value());
  try {
    reader.next();
    FAIL();
  } catch (const DataLossError& e) {
    EXPECT_NE(std::string(e.what()).find("record at byte offset 40"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("failed event crc32 check"), std::string::npos) << e.what();
  }
}

TEST(EventFileReader, ARecordThatIsNotAnEventIsDataLossNamingTheOffset) {
  TempDir tmp;
  std::string bytes =
      frame_record(std::string("\x12\x05"
                               "ab",
                               4));  // length runs past the end
  write_file(tmp.str("events.out.tfevents.x"), bytes);
  try {
    read_events(tmp.str("events.out.tfevents.x"));
    FAIL();
  } catch (const DataLossError& e) {
    EXPECT_NE(std::string(e.what()).find("record at byte offset 0 is not an Event"), std::string::npos) << e.what();
  }
}

TEST(EventFileReader, ListsEventFilesAsTensorBoardDiscoversThem) {
  TempDir tmp;
  for (const char* name : {"events.out.tfevents.0000000002.h.1.1.v2", "events.out.tfevents.0000000001.h.1.1.v2",
                           "notes.txt", "events.out.tfevents.1.profile-empty", "x.tfevents.y"})
    write_file(tmp.str(name), "");
  const std::vector<std::string> files = list_event_files(tmp.str());
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], tmp.str("events.out.tfevents.0000000001.h.1.1.v2"));
  EXPECT_EQ(files[1], tmp.str("events.out.tfevents.0000000002.h.1.1.v2"));
  EXPECT_EQ(files[2], tmp.str("x.tfevents.y"));
  EXPECT_THROW(list_event_files(tmp.str("missing")), NotFoundError);
}

}  // namespace
}  // namespace chorus::summary
