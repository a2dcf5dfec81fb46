// torch_zpp: what differs between the torch versions torch_zpp builds
// against (2.9 to 2.15 tested; docs/pytorch.md, "Versions").
//
// c10d has no version macro for its Backend interface, and its feature
// macros (C10D_BACKEND_HAS_HOOKS and the like, from 2.15) cover only the
// newest additions, so setup.py reads the installed headers and defines:
//   ZPP_C10D_SINGLE_NAMES    Backend has all_gather_single,
//                            reduce_scatter_single, all_to_all_single and
//                            their _coalesced forms as the canonical names
//                            (the old _allgather_base & co. forward to them);
//   ZPP_C10D_GATHER_SINGLE   Backend has gather_single (gather into one
//                            tensor on the root);
//   ZPP_C10D_PREMUL_SUM      Types.hpp names PreMulSumSupplement (the NCCL
//                            name then an alias kept for old code);
//   ZPP_C10D_SHRINK          Backend has supportsShrinking / shrink (2.15);
//   ZPP_C10D_ABORT_HOOKS     Backend has registerAbortHook & co. (2.15);
//   ZPP_C10D_RECONFIGURE     Backend has supportsReconfigure /
//                            get_reconfigure_handle / reconfigure (2.15).
// Overriding the canonical names where they exist keeps torch_zpp off the
// deprecated aliases; overriding the old ones elsewhere reaches the same
// code, since every caller goes through one of the two.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>

namespace torch_zpp {

#ifdef ZPP_C10D_PREMUL_SUM
using PreMulSumSupplement = c10d::PreMulSumSupplement;
#else
using PreMulSumSupplement = c10d::NCCLPreMulSumSupplement;
#endif

}  // namespace torch_zpp
