#ifndef STOKER_CLIENT_BATCH_SOURCE_H_
#define STOKER_CLIENT_BATCH_SOURCE_H_

#include "absl/status/statusor.h"
#include "client/host_batch.h"

namespace stoker::client {

// Anything that yields host batches one at a time: the network loader
// (client/loader.h) or a fake in tests. The device loader
// (client/device_loader.h) sits on top of one.
class BatchSource {
 public:
  virtual ~BatchSource() = default;

  // Blocks until the next batch is available. Returns OUT_OF_RANGE at the end
  // of the current epoch, CANCELLED after Cancel(), or the error that stopped
  // the source. Called from one consumer thread at a time.
  virtual absl::StatusOr<HostBatch> Next() = 0;

  // Makes a blocked or later Next() return CANCELLED. Thread-safe, idempotent.
  virtual void Cancel() = 0;
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_BATCH_SOURCE_H_
