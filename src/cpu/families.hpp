// The four operator families of the CPU backend; each composes the common blocks (common/)
// with its traits.
#pragma once

#include "common/problem.hpp"
#include "cpu/common/scratch.hpp"

#define LINATTN_CPU_DECLARE_FAMILY(NS)                                                      \
  namespace linattn::cpu::NS {                                                              \
  extern const FamilyTraits kTraits;                                                        \
  Status forward(const detail::Problem& p, const ForwardInputs& in, const ForwardOutputs& out, \
                 Workspace ws);                                                             \
  Status backward(const detail::Problem& p, const BackwardInputs& in,                       \
                  const BackwardOutputs& out, Workspace ws);                                \
  }

LINATTN_CPU_DECLARE_FAMILY(kda)
LINATTN_CPU_DECLARE_FAMILY(gdn)
LINATTN_CPU_DECLARE_FAMILY(gla)
LINATTN_CPU_DECLARE_FAMILY(simple_gla)

#undef LINATTN_CPU_DECLARE_FAMILY
