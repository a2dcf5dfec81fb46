// torch_zpp._C: the Python face of the backend (torch_zpp/__init__.py
// registers it). Only argument plumbing and dict building here.
#include <torch/extension.h>

#include <pybind11/chrono.h>

#include "backend.hpp"

using torch_zpp::Settings;
using torch_zpp::ZppBackend;
using torch_zpp::ZppGradResidual;

namespace {

py::dict statsDict(ZppBackend& be) {
  zppCommStats_t s = be.stats();
  py::dict d;
  for (int k = 0; k < zppNumOpKinds; k++) {
    py::dict e;
    e["calls"] = s.calls[k];
    e["intra_node_bytes"] = s.intraNodeBytes[k];
    e["inter_node_bytes"] = s.interNodeBytes[k];
    d[zppOpKindName(static_cast<zppOpKind_t>(k))] = e;
  }
  return d;
}

// The codecs' escapes on this group (docs/codecs.md, "Escapes").
py::dict codecStatsDict(ZppBackend& be) {
  zppCommStats_t s = be.stats();
  py::dict d;
  d["escapes"] = s.quantEscapes;
  d["escape_overflows"] = s.quantEscapeOverflows;
  d["qgz_plain_fallbacks"] = s.qgzPlainFallbacks;
  return d;
}

py::dict topologyDict(ZppBackend& be) {
  zppTopology_t t = be.topology();
  py::dict d;
  d["nodes"] = t.nNodes;
  d["node"] = t.node;
  d["local_rank"] = t.localRank;
  d["local_size"] = t.localSize;
  d["uniform"] = static_cast<bool>(t.uniform);
  return d;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "zpp as a torch.distributed backend (use torch_zpp, not this module)";

  py::class_<ZppBackend, c10d::Backend, c10::intrusive_ptr<ZppBackend>>(m, "ZppBackend")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, int timeoutSec,
                       int qwzBits, int qgzBits, int quantBlock, int64_t compressMinBytes,
                       int hpzGroupSize, const std::string& hostId, const std::string& commName,
                       int timeoutInEffect, const std::string& timeoutFrom, int quantRotate,
                       bool deferred, int qgzErrorFeedback) {
             Settings s;
             s.timeoutSec = timeoutSec;
             s.qwzBits = qwzBits;
             s.qgzBits = qgzBits;
             s.quantBlock = quantBlock;
             s.compressMinBytes = compressMinBytes;
             s.hpzGroupSize = hpzGroupSize;
             s.quantRotate = quantRotate;
             s.qgzErrorFeedback = qgzErrorFeedback;
             s.hostId = hostId;
             s.commName = commName;
             s.timeoutInEffect = timeoutInEffect;
             s.timeoutFrom = timeoutFrom;
             s.deferred = deferred;
             return c10::make_intrusive<ZppBackend>(store, rank, size, s);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_s"),
           py::arg("qwz_bits"), py::arg("qgz_bits"), py::arg("quant_block"),
           py::arg("compress_min_bytes"), py::arg("hpz_group_size"), py::arg("host_id"),
           py::arg("comm_name"), py::arg("timeout_in_effect") = 0, py::arg("timeout_from") = "",
           py::arg("quant_rotate") = ZPP_CONFIG_UNDEF_INT, py::arg("deferred") = false,
           py::arg("qgz_error_feedback") = ZPP_CONFIG_UNDEF_INT,
           py::call_guard<py::gil_scoped_release>())
      .def("qwz_all_gather", &ZppBackend::qwzAllGather, py::arg("output"), py::arg("input"),
           py::arg("bits"), py::call_guard<py::gil_scoped_release>())
      .def("qgz_reduce_scatter", &ZppBackend::qgzReduceScatter, py::arg("output"), py::arg("input"),
           py::arg("op"), py::arg("bits"), py::call_guard<py::gil_scoped_release>())
      .def("qgz_reduce_scatter_ef", &ZppBackend::qgzReduceScatterEF, py::arg("output"),
           py::arg("input"), py::arg("op"), py::arg("residual"),
           py::call_guard<py::gil_scoped_release>())
      .def("stats", &statsDict)
      .def("codec_stats", &codecStatsDict)
      .def("reset_stats", &ZppBackend::resetStats)
      .def("topology", &topologyDict)
      // torch 2.15 binds Backend.get_error, 2.9 only ProcessGroupNCCL's: ours,
      // on every version, returns torch's own ErrorType.
      .def("get_error", &ZppBackend::getError, py::call_guard<py::gil_scoped_release>());

  // torch_zpp.GradResidual wraps it (__init__.py): error feedback's residuals
  // of one gradient buffer. The methods wait for the calls issued with it,
  // so they release the GIL.
  py::class_<ZppGradResidual, c10::intrusive_ptr<ZppGradResidual>>(m, "GradResidual")
      .def(py::init([](const c10::intrusive_ptr<ZppBackend>& backend, int64_t recvcount,
                       at::ScalarType dtype, int bits) {
             return c10::make_intrusive<ZppGradResidual>(backend, recvcount, dtype, bits);
           }),
           py::arg("backend"), py::arg("recvcount"), py::arg("dtype"), py::arg("bits"),
           py::call_guard<py::gil_scoped_release>())
      .def("undo", &ZppGradResidual::undo, py::call_guard<py::gil_scoped_release>())
      .def("state", &ZppGradResidual::state, py::call_guard<py::gil_scoped_release>())
      .def("load_state", &ZppGradResidual::loadState, py::arg("state"),
           py::call_guard<py::gil_scoped_release>())
      .def("state_bytes", &ZppGradResidual::stateBytes, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("recvcount", &ZppGradResidual::recvcount)
      .def_property_readonly("dtype", &ZppGradResidual::dtype)
      .def_property_readonly("bits", &ZppGradResidual::bits)
      .def_property_readonly("group_name", &ZppGradResidual::groupName);

  m.attr("UNDEF_INT") = ZPP_CONFIG_UNDEF_INT;
  m.def("version", [] {
    int v = 0;
    zppGetVersion(&v);
    return v;
  });
#ifdef ZPP_TORCH_CUDA
  m.attr("has_device_path") = true;
#else
  m.attr("has_device_path") = false;
#endif
}
