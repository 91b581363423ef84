// client/context_create.h — Context::Create with the data sockets' ports chosen by the caller
// (used by SwitchRejoin, switchml/rejoin.h).
//
// A JobService job admits a rank once per placement unless the rank registers again with the
// identical address and ports (dataplane JobTable::Admit). A rejoin attempt that some rank
// failed leaves the other ranks registered; the next attempt therefore binds the ports of the
// previous one, so that their registrations are accepted again as identical.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "switchml/context.h"
#include "switchml/options.h"
#include "switchml/status.h"

namespace switchml::client {

// Context::Create, with worker thread t's socket bound to ports[t] when `ports` has one entry
// per worker thread (a port that cannot be bound, e.g. taken meanwhile, falls back to an
// ephemeral one), otherwise to ephemeral ports. On return, also on failure once the sockets
// were opened, `ports` holds the ports bound (one per worker thread); it is left unchanged
// when Create failed before opening them.
StatusOr<std::unique_ptr<Context>> CreateContextOnPorts(const Options& options,
                                                        std::vector<uint16_t>& ports);

}  // namespace switchml::client
