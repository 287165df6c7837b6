#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>

#include "src/sim/api_server_internal.h"

namespace dralens::sim::apiserver {

// cpp-httplib 0.11 does not expose connection sockets. Stop() must close idle keep-alive
// connections at once (their threads would otherwise wait out the keep-alive timeout) and
// watches must notice a client that went away, so we find our accepted sockets by their local
// port in /proc/self/fd. Linux-only, like the rest of the driver.

namespace {

int LocalPort(int fd, sockaddr_storage* peer) {
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    return -1;
  }
  int port = -1;
  if (local.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  } else if (local.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
  } else {
    return -1;
  }
  int listening = 0;
  socklen_t optlen = sizeof(listening);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &optlen) != 0 || listening != 0) {
    return -1;
  }
  if (peer != nullptr) {
    socklen_t plen = sizeof(*peer);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(peer), &plen) != 0) {
      return -1;
    }
  }
  return port;
}

std::vector<int> ProcessFds() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    return fds;
  }
  int self = dirfd(dir);
  while (dirent* ent = readdir(dir)) {
    int fd = 0;
    if (absl::SimpleAtoi(ent->d_name, &fd) && fd != self) {
      fds.push_back(fd);
    }
  }
  closedir(dir);
  return fds;
}

}  // namespace

void ShutdownAcceptedSockets(int port) {
  for (int fd : ProcessFds()) {
    if (LocalPort(fd, nullptr) == port) {
      shutdown(fd, SHUT_RDWR);
    }
  }
}

int FindAcceptedSocket(int port, const std::string& peer_ip, int peer_port) {
  for (int fd : ProcessFds()) {
    sockaddr_storage peer{};
    if (LocalPort(fd, &peer) != port) {
      continue;
    }
    char buf[INET6_ADDRSTRLEN] = {};
    int pport = -1;
    if (peer.ss_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&peer);
      inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
      pport = ntohs(in->sin_port);
    } else {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&peer);
      inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
      pport = ntohs(in6->sin6_port);
    }
    if (pport == peer_port && peer_ip == buf) {
      return fd;
    }
  }
  return -1;
}

bool PeerClosed(int fd) {
  if (fd < 0) {
    return false;
  }
  char c = 0;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) {
    return true;
  }
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace dralens::sim::apiserver
