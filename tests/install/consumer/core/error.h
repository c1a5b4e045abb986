// The consumer's own core/error.h: a name chorus also uses (chorus's is <chorus/core/error.h>). Were a
// chorus header to include "core/error.h" it would get this file, and chorus::Error would be missing.
#pragma once

namespace consumer {
inline int error_code() { return 7; }
}  // namespace consumer
