// The blocking pool's flag (BlockingPool::Options). common/option_flags.h says how it
// binds.
#include "common/io/blocking_pool.h"
#include "common/option_flags.h"

FERRY_OPTION_FLAG(ferry::BlockingPool::Options, blocking_threads, threads,
                  "Threads for the Spark front door's blocking work (index loads, file opens, "
                  "deletes).");
