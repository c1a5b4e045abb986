#include "collective/communicator.h"

#include "core/env.h"

namespace chorus::collective {

std::chrono::milliseconds default_timeout() { return env::collective_timeout().value_or(kDefaultTimeout); }

}  // namespace chorus::collective
