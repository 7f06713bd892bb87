#include "cli.hpp"

#include <iostream>

namespace nystrom::cli {

int run(int, char**) {
  std::cerr << "nystrom: not yet implemented\n";
  return 1;
}

}  // namespace nystrom::cli
