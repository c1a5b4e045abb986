// image_dataset_from_directory on hostile folders: symlink loops (followed and not), links to
// themselves, empty folders and folders without images, a missing directory or a file in its place,
// deep trees, unreadable folders.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>

#include "tests/data/data_test_util.h"
#include <chorus/core/error.h>
#include <chorus/data/io/image_folder.h>
#include <chorus/data/io/image_folder_internal.h>
#include <chorus/data/io/png.h>

namespace chorus::data {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

void touch(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  testing::spit(path, "x");
}

internal::DirectoryIndex listing(const std::string& dir, ImageFolderOptions o) {
  o.verbose = false;
  const auto plan = internal::plan_image_folder(o);
  // "both" checks the training subset first, as image_dataset_from_directory_both does.
  return internal::image_folder_subset(internal::list_image_folder(dir, plan), dir, plan,
                                       o.subset == "both" ? "training" : o.subset);
}

TEST(ImageFolderHostile, SymlinkLoopsAreWalkedOnce) {
  TempDir dir;
  touch(dir / "a/x.png");
  touch(dir / "a/sub/y.png");
  fs::create_directory_symlink(dir / "a", dir / "a/sub/up");  // a/sub/up -> a: a loop
  fs::create_directory_symlink(dir / "a/sub", dir / "a/sub/self_dir");
  fs::create_symlink("self.png", dir / "a/self.png");  // a link to itself: ELOOP, listed as a file
  for (bool follow : {false, true}) {
    SCOPED_TRACE(follow);
    const auto idx = listing(dir.path(), {.shuffle = false, .follow_links = follow});
    EXPECT_EQ(idx.file_paths, (std::vector<std::string>{dir / "a/self.png", dir / "a/x.png", dir / "a/sub/y.png"}));
  }
}

TEST(ImageFolderHostile, SymlinkDagsAreWalkedPathByPath) {
  // Each level links twice to the next: with follow_links, level i is reached over 2^(i-r) paths
  // from each level r (as os.walk does; no loop, so nothing is cut).
  TempDir dir;
  const int levels = 12;
  for (int i = 0; i < levels; ++i) touch(dir / ("c/l" + std::to_string(i) + "/img.png"));
  for (int i = 0; i + 1 < levels; ++i)
    for (const char* name : {"p", "q"})
      fs::create_directory_symlink(dir / ("c/l" + std::to_string(i + 1)),
                                   dir / ("c/l" + std::to_string(i) + "/" + name));
  EXPECT_EQ(listing(dir.path(), {.shuffle = false}).file_paths.size(), static_cast<std::size_t>(levels));
  std::size_t expected = 0;
  for (int r = 0; r < levels; ++r)
    for (int i = r; i < levels; ++i) expected += std::size_t{1} << (i - r);
  EXPECT_EQ(listing(dir.path(), {.shuffle = false, .follow_links = true}).file_paths.size(), expected);
}

TEST(ImageFolderHostile, FollowedLinkChainsStopFortyFoldersDown) {
  // l0/next -> l1, l1/next -> l2, ... 45 levels: from l_r the walk goes down while the folder is at
  // most kMaxWalkDepth below the class folder c (l_r itself is 1 below it).
  TempDir dir;
  const int levels = internal::kMaxWalkDepth + 5;
  for (int i = 0; i < levels; ++i) touch(dir / ("c/l" + std::to_string(i) + "/img.png"));
  for (int i = 0; i + 1 < levels; ++i)
    fs::create_directory_symlink(dir / ("c/l" + std::to_string(i + 1)), dir / ("c/l" + std::to_string(i) + "/next"));
  std::size_t expected = 0;
  for (int r = 0; r < levels; ++r) expected += static_cast<std::size_t>(std::min(levels - r, internal::kMaxWalkDepth));
  EXPECT_EQ(listing(dir.path(), {.shuffle = false, .follow_links = true}).file_paths.size(), expected);
}

TEST(ImageFolderHostile, DeepTreesWithoutLinksAreWalkedWhole) {
  TempDir dir;
  std::string deep = "c";
  for (int i = 0; i < internal::kMaxWalkDepth + 5; ++i) deep += "/d";
  touch(dir / (deep + "/bottom.png"));
  const auto idx = listing(dir.path(), {.shuffle = false});
  ASSERT_EQ(idx.file_paths.size(), 1u);
  EXPECT_EQ(idx.file_paths[0], dir / (deep + "/bottom.png"));
}

TEST(ImageFolderHostile, NoImagesAndMissingDirectories) {
  TempDir dir;
  auto message = [&](const std::string& d, ImageFolderOptions o) -> std::string {
    try {
      listing(d, o);
    } catch (const Error& e) {
      return std::string(error_code_name(e.code())) + ": " + e.message();
    }
    return "no error";
  };
  // Empty: no class folders.
  EXPECT_EQ(message(dir.path(), {}), "INVALID_ARGUMENT: image_dataset_from_directory: No images found in directory " +
                                         dir.path() + ". Allowed formats: ('.bmp', '.gif', '.jpeg', '.jpg', '.png')");
  // Class folders holding no images (a text file, a .tiff, an image in a hidden folder).
  touch(dir / "a/readme.txt");
  touch(dir / "b/x.tiff");
  touch(dir / ".git/y.png");
  EXPECT_NE(message(dir.path(), {}).find("No images found"), std::string::npos);
  // Without labels the whole tree counts, hidden folders too (os.walk skips nothing).
  EXPECT_EQ(listing(dir.path(), {.label_mode = "none"}).file_paths, std::vector<std::string>{dir / ".git/y.png"});
  touch(dir / "a/one.png");
  // One image: validation_split 0.2 keeps int(0.2) = 0 for validation, so training is empty (Keras's rule).
  EXPECT_NE(message(dir.path(), {.seed = 1, .validation_split = 0.2, .subset = "training"}).find("No images found"),
            std::string::npos);
  EXPECT_EQ(listing(dir.path(), {.seed = 1, .validation_split = 0.2, .subset = "validation"}).file_paths.size(), 1u);
  EXPECT_NE(message(dir.path(), {.seed = 1, .validation_split = 0.2, .subset = "both"}).find("No training images"),
            std::string::npos);
  // Missing, or a file where the directory should be.
  EXPECT_EQ(message(dir / "missing", {}).rfind("NOT_FOUND: ", 0), 0u) << message(dir / "missing", {});
  EXPECT_NE(message(dir / "missing", {}).find(dir / "missing"), std::string::npos);
  EXPECT_EQ(message(dir / "a/one.png", {}).rfind("FAILED_PRECONDITION: ", 0), 0u);
  EXPECT_EQ(message(dir / "missing", {.label_mode = "none"}).rfind("NOT_FOUND: ", 0), 0u);
  // class_names that are not folders, or repeated; binary without 2 classes; explicit labels miscounted.
  EXPECT_NE(message(dir.path(), {.class_names = {"a", "c"}}).find("did not match the names of the subdirectories"),
            std::string::npos);
  EXPECT_NE(message(dir.path(), {.class_names = {"a", "a"}}).find("twice"), std::string::npos);
  EXPECT_NE(message(dir.path(), {.label_mode = "binary", .class_names = {"a"}}).find("exactly 2"), std::string::npos);
  EXPECT_NE(message(dir.path(), {.labels = "explicit", .explicit_labels = {1, 2, 3}}).find("len(labels) is 3"),
            std::string::npos)
      << message(dir.path(), {.labels = "explicit", .explicit_labels = {1, 2, 3}});
  EXPECT_NE(message(dir.path(), {.labels = "explicit", .class_names = {"a"}}).find("class_names"), std::string::npos);
}

TEST(ImageFolderHostile, UnreadableFoldersAreSkipped) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions do not stop root from reading a folder";
  TempDir dir;
  touch(dir / "a/x.png");
  touch(dir / "a/locked/y.png");
  fs::permissions(dir / "a/locked", fs::perms::none);
  const auto idx = listing(dir.path(), {.shuffle = false});
  fs::permissions(dir / "a/locked", fs::perms::owner_all);
  EXPECT_EQ(idx.file_paths, std::vector<std::string>{dir / "a/x.png"});
}

// Bad files among good ones: each bad one is an error from the next() that would return it, naming
// the file (and the decoder's reason); the next call returns the next image.
TEST(ImageFolderHostile, BadFilesFailOneElementEachAndNameTheFile) {
  TempDir dir;
  std::vector<std::uint8_t> px(6 * 5 * 3, 77);
  const std::string good = encode_png(px.data(), 6, 5, 3);
  fs::create_directories(dir / "c");
  testing::spit(dir / "c/a_good.png", good);
  testing::spit(dir / "c/b_truncated.png", good.substr(0, good.size() / 2));
  std::string flipped = good;
  flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x55);  // a CRC/zlib error
  testing::spit(dir / "c/c_corrupt.png", flipped);
  testing::spit(dir / "c/d_empty.jpg", "");
  testing::spit(dir / "c/e_text.jpeg", "hello, I am not a JPEG");
  fs::create_symlink(dir / "c/nowhere.png", dir / "c/f_dangling.png");
  ASSERT_EQ(::mkfifo((dir / "c/g_fifo.png").c_str(), 0600), 0);
  testing::spit(dir / "c/h_good.png", good);
  auto ds = image_dataset_from_directory(
      dir.path(),
      {.batch_size = std::nullopt, .image_size = {4, 4}, .shuffle = false, .num_parallel_calls = 2, .verbose = false});
  auto it = ds.dataset.make_iterator();
  std::vector<std::string> seen;
  for (int i = 0; i < 20; ++i) {
    try {
      auto e = it.next();
      if (!e) break;
      EXPECT_EQ((*e)[0].shape(), (Shape{4, 4, 3}));
      seen.push_back("ok");
    } catch (const Error& err) {
      const std::string m = err.message();
      const std::size_t slash = m.find(dir.path() + "/c/");
      EXPECT_EQ(m.rfind("image_dataset_from_directory: " + dir.path() + "/c/", 0), 0u) << m;
      seen.push_back(std::string(error_code_name(err.code())) + " " +
                     (slash == std::string::npos ? m : m.substr(slash + dir.path().size() + 3, 1)));
    }
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"ok", "DATA_LOSS b", "DATA_LOSS c", "DATA_LOSS d", "INVALID_ARGUMENT e",
                                            "NOT_FOUND f", "INVALID_ARGUMENT g", "ok"}));
}

}  // namespace
}  // namespace chorus::data
