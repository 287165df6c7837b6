#include "src/common/thread_name.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <string>
#include <thread>

namespace dralens::common {
namespace {

std::string ThisThreadName() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

TEST(ThreadNameTest, NamesTheCallingThread) {
  std::string name;
  std::thread t([&] {
    NameThisThread("cluster-tick");
    name = ThisThreadName();
  });
  t.join();
  EXPECT_EQ(name, "cluster-tick");
}

TEST(ThreadNameTest, ANameLongerThanTheKernelKeepsIsCutThere) {
  std::string name;
  std::thread t([&] {
    NameThisThread("w:resourceclaims-and-more");
    name = ThisThreadName();
  });
  t.join();
  EXPECT_EQ(name, "w:resourceclaim");
}

}  // namespace
}  // namespace dralens::common
