// The consumer's own model/model.h: a name chorus also uses (chorus's is <chorus/model/model.h>).
#pragma once

namespace consumer {
struct Model {
  int layers = 3;
};
}  // namespace consumer
