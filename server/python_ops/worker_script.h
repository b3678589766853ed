#ifndef STOKER_SERVER_PYTHON_OPS_WORKER_SCRIPT_H_
#define STOKER_SERVER_PYTHON_OPS_WORKER_SCRIPT_H_

namespace stoker::server {

// The text of server/python_ops/worker.py, built into the server so that a
// worker needs only an interpreter (and the operator's modules), not files
// beside the binary.
extern const char kPythonWorkerScript[];

}  // namespace stoker::server

#endif  // STOKER_SERVER_PYTHON_OPS_WORKER_SCRIPT_H_
