// Start-up cleanup of the temp files a killed writer leaves behind.
//
// Every durable file of the node role is written with common::WriteFileAtomically, whose temp
// file (`.<base>.tmp-XXXXXX`) stays when the process dies between creating and renaming it. At
// start, before anything writes, RemoveStaleTempFiles removes:
//   - in the driver's own plugin directory (`<plugins-dir>/<driver>/`, where the checkpoint
//     lives): every such temp file, whatever its base — the directory is ours alone;
//   - in the CDI root, which other tools share: only temp files of our own spec files
//     (`.k8s.gpu.dralens.dev-claim_<uid>.json.tmp-XXXXXX`).
// Anything else — other names, directories, links — is left alone. Each removed file is logged
// and counted in dralens_node_temp_files_removed_total{location}.
#pragma once

#include <string>

#include "prometheus/registry.h"

namespace dralens::driver::prepare {

struct TempCleanupResult {
  int plugin_dir = 0;  // files removed there
  int cdi_root = 0;
  int errors = 0;  // temp files that could not be removed (logged)
};

TempCleanupResult RemoveStaleTempFiles(const std::string& plugin_dir, const std::string& cdi_root,
                                       prometheus::Registry& registry);

}  // namespace dralens::driver::prepare
