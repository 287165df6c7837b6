#include "src/common/thread_name.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <string>
#include <thread>

namespace dralens::common {
namespace {

// The name a new thread reads back after naming itself `name`.
std::string NameReadBack(const std::string& name) {
  std::string read;
  std::thread t([&] {
    NameThisThread(name);
    char buffer[16] = {};
    pthread_getname_np(pthread_self(), buffer, sizeof(buffer));
    read = buffer;
  });
  t.join();
  return read;
}

TEST(ThreadNameTest, NamesTheCallingThread) {
  EXPECT_EQ(NameReadBack("cluster-tick"), "cluster-tick");
}

TEST(ThreadNameTest, ANameLongerThanTheKernelKeepsIsCutThere) {
  EXPECT_EQ(NameReadBack("w:resourceclaims-and-more"), "w:resourceclaim");
}

}  // namespace
}  // namespace dralens::common
