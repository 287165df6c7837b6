// A kubeconfig file for the embedded API server, for tests and drivers that start the binary.
#pragma once

#include <fstream>
#include <string>

namespace dralens::testing {

// Writes a kubeconfig at `path` that points at `server` without credentials.
inline void WriteKubeconfig(const std::string& path, const std::string& server) {
  std::ofstream(path) << "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                         "clusters:\n- name: t\n  cluster:\n    server: "
                      << server
                      << "\ncontexts:\n- name: t\n  context:\n    cluster: t\n"
                         "    user: t\nusers:\n- name: t\n  user: {}\n";
}

}  // namespace dralens::testing
