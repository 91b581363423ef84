// switchml/switchml.h — umbrella header of the SwitchML-C++ client library.
#pragma once

#include "switchml/context.h"   // IWYU pragma: export
#include "switchml/failover.h"  // IWYU pragma: export
#include "switchml/options.h"   // IWYU pragma: export
#include "switchml/rejoin.h"    // IWYU pragma: export
#include "switchml/status.h"    // IWYU pragma: export
#include "switchml/types.h"     // IWYU pragma: export
