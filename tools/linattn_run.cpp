// TEMPORARY placeholder, replaced by the CLI.
#include <cstdio>
#include "linattn/linattn.hpp"
int main() { std::printf("linattn %s\n", linattn::version()); return 0; }
