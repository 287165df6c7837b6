#include "src/common/atomic_file.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dralens::common {
namespace {

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = absl::StrCat(::testing::TempDir(), "/atomic_file_test.XXXXXX");
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& name : ListDir(dir_)) {
      ::unlink(absl::StrCat(dir_, "/", name).c_str());
    }
    ::rmdir(dir_.c_str());
  }

  static std::vector<std::string> ListDir(const std::string& dir) {
    std::vector<std::string> names;
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      return names;
    }
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") {
        names.push_back(name);
      }
    }
    ::closedir(d);
    return names;
  }

  std::string dir_;
};

TEST_F(AtomicFileTest, WritesAndReadsBack) {
  const std::string path = dir_ + "/checkpoint.json";
  ASSERT_TRUE(WriteFileAtomically(path, "{\"v\":1}").ok());
  absl::StatusOr<std::string> content = ReadFile(path);
  ASSERT_TRUE(content.ok()) << content.status();
  EXPECT_EQ(*content, "{\"v\":1}");
  EXPECT_THAT(ListDir(dir_), ::testing::ElementsAre("checkpoint.json"));
}

TEST_F(AtomicFileTest, EmptyAndBinaryContent) {
  const std::string path = dir_ + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  EXPECT_EQ(*ReadFile(path), "");
  std::string binary(1 << 20, '\0');
  for (size_t i = 0; i < binary.size(); ++i) {
    binary[i] = static_cast<char>(i * 7);
  }
  ASSERT_TRUE(WriteFileAtomically(path, binary).ok());
  EXPECT_EQ(*ReadFile(path), binary);
}

TEST_F(AtomicFileTest, ModeIsHonouredExactly) {
  const std::string path = dir_ + "/secret";
  ASSERT_TRUE(WriteFileAtomically(path, "x", 0600).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_TRUE(WriteFileAtomically(path, "y", 0644).ok());
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
}

TEST_F(AtomicFileTest, OverwriteReplacesContent) {
  const std::string path = dir_ + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, "a much longer first version").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "short").ok());
  EXPECT_EQ(*ReadFile(path), "short");
  EXPECT_EQ(ListDir(dir_).size(), 1u);
}

TEST_F(AtomicFileTest, MissingDirectoryFailsAndLeavesNoTempFiles) {
  const std::string path = dir_ + "/no/such/dir/f";
  absl::Status status = WriteFileAtomically(path, "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr(path));
  EXPECT_TRUE(ListDir(dir_).empty());
}

TEST_F(AtomicFileTest, RenameFailureRemovesTheTempFile) {
  // The target is a non-empty directory, so rename(2) fails after the temp file was written.
  const std::string path = dir_ + "/target";
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomically(path + "/inner", "x").ok());
  absl::Status status = WriteFileAtomically(path, "x");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(ListDir(dir_), ::testing::ElementsAre("target"));
  ASSERT_TRUE(RemoveFileDurably(path + "/inner").ok());
  ::rmdir(path.c_str());
}

TEST_F(AtomicFileTest, ReadMissingFileIsNotFound) {
  absl::StatusOr<std::string> content = ReadFile(dir_ + "/missing");
  EXPECT_EQ(content.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(AtomicFileTest, RemoveIsDurableAndIdempotent) {
  const std::string path = dir_ + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, "x").ok());
  ASSERT_TRUE(RemoveFileDurably(path).ok());
  EXPECT_EQ(ReadFile(path).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(RemoveFileDurably(path).ok());
  EXPECT_TRUE(ListDir(dir_).empty());
}

TEST_F(AtomicFileTest, RelativePathsWork) {
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(::chdir(dir_.c_str()), 0);
  absl::Status status = WriteFileAtomically("relative.txt", "r");
  absl::StatusOr<std::string> content = ReadFile("relative.txt");
  ASSERT_EQ(::chdir(cwd), 0);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(*content, "r");
}

// Writers race each other while readers keep reading: every read sees one complete version.
TEST_F(AtomicFileTest, ConcurrentWritersNeverProduceATornFile) {
  const std::string path = dir_ + "/shared";
  auto version = [](int writer, int i) {
    // Different lengths and fill characters, so a mix of two versions is detectable.
    return std::string(1000 + writer * 3000 + i % 7, static_cast<char>('a' + writer));
  };
  ASSERT_TRUE(WriteFileAtomically(path, version(0, 0)).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> bad_reads{0};
  std::atomic<int> reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        absl::StatusOr<std::string> content = ReadFile(path);
        if (!content.ok() || content->empty()) {
          ++bad_reads;
          continue;
        }
        const char c = (*content)[0];
        const int writer = c - 'a';
        const bool uniform = content->find_first_not_of(c) == std::string::npos;
        const size_t base = 1000 + static_cast<size_t>(writer) * 3000;
        if (!uniform || content->size() < base || content->size() >= base + 7) {
          ++bad_reads;
        }
        ++reads;
      }
    });
  }
  std::vector<std::thread> writers;
  std::atomic<int> write_errors{0};
  for (int w = 0; w < 3; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 60; ++i) {
        if (!WriteFileAtomically(path, version(w, i)).ok()) {
          ++write_errors;
        }
      }
    });
  }
  for (std::thread& t : writers) {
    t.join();
  }
  stop = true;
  for (std::thread& t : readers) {
    t.join();
  }
  EXPECT_EQ(write_errors.load(), 0);
  EXPECT_EQ(bad_reads.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_THAT(ListDir(dir_), ::testing::ElementsAre("shared"));
}

// A process killed in the middle of a write: the child's file size limit stops its write() with
// SIGXFSZ, which ends it like a SIGKILL would, after the temp file exists.
TEST_F(AtomicFileTest, LeftoversOfAKilledWriterAreRecognisedAndRemoved) {
  const std::string path = dir_ + "/checkpoint.json";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit none{0, 0};
    ::setrlimit(RLIMIT_CORE, &none);
    rlimit small{16, 16};
    ::setrlimit(RLIMIT_FSIZE, &small);
    (void)WriteFileAtomically(path, std::string(4096, 'x'));
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  std::vector<std::string> left = ListDir(dir_);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_TRUE(IsAtomicTempName(left[0])) << left[0];
  EXPECT_TRUE(IsAtomicTempName(left[0], "checkpoint"));
  EXPECT_FALSE(IsAtomicTempName(left[0], "k8s.gpu.dralens.dev-claim_"));

  // Foreign files, and names that are almost ours, stay.
  const std::vector<std::string> foreign = {"checkpoint.json",
                                            ".checkpoint.json.tmp-abc",
                                            ".checkpoint.json.tmp-abc-de",
                                            "checkpoint.json.tmp-abcdef",
                                            "..tmp-abcdef",
                                            "other.json",
                                            ".swp.tmp-ABCDE!"};
  for (const std::string& name : foreign) {
    EXPECT_FALSE(IsAtomicTempName(name)) << name;
    ASSERT_TRUE(WriteFileAtomically(dir_ + "/" + name, "x").ok());
  }
  // A directory and a link with a temp file's name are not removed either.
  ASSERT_EQ(::mkdir((dir_ + "/.d.tmp-aaaaaa").c_str(), 0700), 0);
  ASSERT_EQ(::symlink("/etc/hostname", (dir_ + "/.l.tmp-bbbbbb").c_str()), 0);
  // A second leftover of another base.
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/.spec.json.tmp-Zz09aB", "x").ok());

  TempCleanup cleaned = RemoveStaleTempFiles(dir_);
  EXPECT_THAT(cleaned.errors, ::testing::IsEmpty());
  EXPECT_THAT(cleaned.removed, ::testing::UnorderedElementsAre(dir_ + "/" + left[0],
                                                               dir_ + "/.spec.json.tmp-Zz09aB"));
  std::vector<std::string> after = ListDir(dir_);
  for (const std::string& name : foreign) {
    EXPECT_THAT(after, ::testing::Contains(name));
  }
  EXPECT_THAT(after, ::testing::Contains(".d.tmp-aaaaaa"));
  EXPECT_THAT(after, ::testing::Contains(".l.tmp-bbbbbb"));
  EXPECT_EQ(after.size(), foreign.size() + 2);
  ::rmdir((dir_ + "/.d.tmp-aaaaaa").c_str());

  // A prefix limits the cleanup to one family of files; a missing directory is nothing to do.
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/.a-1.tmp-aaaaaa", "x").ok());
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/.b-1.tmp-aaaaaa", "x").ok());
  EXPECT_THAT(RemoveStaleTempFiles(dir_, "a-").removed,
              ::testing::ElementsAre(dir_ + "/.a-1.tmp-aaaaaa"));
  EXPECT_TRUE(RemoveStaleTempFiles(dir_ + "/missing").removed.empty());
  EXPECT_TRUE(RemoveStaleTempFiles(dir_ + "/missing").errors.empty());
}

}  // namespace
}  // namespace dralens::common
