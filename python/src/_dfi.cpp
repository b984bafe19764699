// dfi._dfi — the native half of the Python bindings (nanobind). It binds the public C++ API of
// include/dfi/cluster and include/dfi/flow and nothing more: the Python half (dfi/__init__.py)
// turns NumPy dtypes into schemas, checks arrays against a flow's schema and wraps batches as
// NumPy views. See python/README.md.
//
// Rules every binding here follows:
//  - The GIL is released around every call that may wait (opening a flow, push, flush, close,
//    consume, barriers, Node construction and finish), so other Python threads run meanwhile.
//  - A failed dfi::Status and a thrown dfi::Error both become dfi.Error(code, message), with the
//    C++ code and message unchanged (the translator below).
//  - Each source, target and barrier owns the fabric::Worker it needs, created by the constructor,
//    so it belongs to the Python thread that created it, as the C++ objects belong to one thread.
//  - Objects keep their Node alive (keep_alive), so Python's collection order cannot free a Node
//    under a flow.
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/barrier.hpp"
#include "dfi/flow/combiner.hpp"
#include "dfi/flow/detail/rings.hpp"
#include "dfi/flow/replicate.hpp"
#include "dfi/flow/shuffle.hpp"
#include "dfi/flow/spec.hpp"
#include "dfi/registry/client.hpp"
#include "dfi/version.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace dfi::python {
namespace {

using std::chrono::milliseconds;
using Release = nb::call_guard<nb::gil_scoped_release>;

// dfi.Error, handed over by dfi/__init__.py (_set_error_class). A strong reference that is never
// dropped: the class lives as long as the interpreter.
PyObject* error_class = nullptr;

void check(const Status& status) {
  if (!status) throw Error(status.code(), status.message());
}

// (name, type name, offset, bytes) per column, and the tuple width: what the Python half needs
// to build the flow's NumPy dtype.
using SchemaLayout = std::pair<std::vector<std::tuple<std::string, std::string, std::size_t, std::size_t>>,
                               std::size_t>;
SchemaLayout layout_of(const flow::Schema& schema) {
  SchemaLayout layout;
  for (std::size_t i = 0; i < schema.column_count(); ++i) {
    const flow::Column& c = schema.column(i);
    layout.first.emplace_back(c.name, std::string(flow::type_name(c.type)), schema.offset(i),
                              schema.column_bytes(i));
  }
  layout.second = schema.tuple_bytes();
  return layout;
}

// The spec of flow `name` as its sources and targets see it (the schema for the dtype checks).
flow::FlowSpec lookup_spec(cluster::Node& node, const std::string& name, flow::FlowType type,
                           milliseconds timeout) {
  return flow::detail::open_spec(node, name, type, std::nullopt,
                                 flow::detail::open_deadline(timeout));
}

// A contiguous buffer (a NumPy array, bytes, ...) held for the duration of one push.
class Buffer {
 public:
  Buffer(nb::handle object, std::size_t tuple_bytes, const std::string& flow) {
    if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
    if (tuple_bytes == 0 || static_cast<std::size_t>(view_.len) % tuple_bytes != 0) {
      const auto len = static_cast<std::size_t>(view_.len);
      PyBuffer_Release(&view_);
      throw Error(Errc::invalid_argument, "flow '" + flow + "': a buffer of " + std::to_string(len) +
                                              " bytes is not a whole number of " +
                                              std::to_string(tuple_bytes) + "-byte tuples");
    }
  }
  ~Buffer() { PyBuffer_Release(&view_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const std::byte* data() const { return static_cast<const std::byte*>(view_.buf); }
  std::size_t bytes() const { return static_cast<std::size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

using RawView = nb::ndarray<nb::numpy, const std::uint8_t, nb::ndim<1>>;

// The tuples of `batch` as a read-only uint8 NumPy array over the ring memory (no copy), which
// keeps `owner` (the target) alive; None for an empty batch (the end of the flow).
nb::object batch_view(const flow::TupleBatch& batch, nb::handle owner) {
  if (batch.empty()) return nb::none();
  const std::size_t shape[1] = {batch.count * batch.tuple_bytes};
  return nb::cast(RawView(reinterpret_cast<const std::uint8_t*>(batch.data), 1, shape, owner));
}

// One source of any flow type with the worker it runs on (the worker outlives the source).
template <class Source, class Options>
struct SourceBox {
  SourceBox(cluster::Node& node, const std::string& flow_name, int thread, flow::FlowType type,
            milliseconds open_timeout, Options options)
      : name(flow_name),
        spec(lookup_spec(node, flow_name, type, open_timeout)),
        worker(std::make_unique<fabric::Worker>(node.fabric(),
                                                "python source " + std::to_string(thread) + " of " + flow_name)),
        source(std::make_unique<Source>(node, *worker, flow_name, thread, std::move(options))) {}

  void push(nb::handle array) {
    Buffer buffer(array, spec.schema.tuple_bytes(), name);
    nb::gil_scoped_release release;
    check(source->push_bulk(buffer.data(), buffer.bytes() / spec.schema.tuple_bytes()));
  }

  std::string name;
  flow::FlowSpec spec;
  std::unique_ptr<fabric::Worker> worker;
  std::unique_ptr<Source> source;
};

using ShuffleSourceBox = SourceBox<flow::ShuffleSource, flow::SourceOptions>;
using ReplicateSourceBox = SourceBox<flow::ReplicateSource, flow::ReplicateSourceOptions>;
using CombinerSourceBox = SourceBox<flow::CombinerSource, flow::CombinerSourceOptions>;

template <class Target>
struct TargetBox {
  template <class... Args>
  TargetBox(const std::string& flow_name, flow::Schema tuple_schema, Args&&... args)
      : name(flow_name), schema(std::move(tuple_schema)), target(std::forward<Args>(args)...) {}

  // Waits for the next batch (GIL released) and returns it as a raw view, or None at the end.
  // Rows of the current batch that consume_into left are handed out first.
  nb::object consume(nb::handle self, std::int64_t timeout_ms) {
    check(take_error());
    if (taken == batch.count) {
      Status status;
      {
        nb::gil_scoped_release release;
        status = target.consume(batch, milliseconds(timeout_ms));
      }
      taken = 0;
      check(status);
    }
    flow::TupleBatch rest = batch;
    rest.data = batch.data + taken * batch.tuple_bytes;
    rest.count = batch.count - taken;
    taken = batch.count;
    return batch_view(rest, self);
  }

  // Copies rows into `array` (writable, C-contiguous, whole rows; the Python half checked its
  // dtype) from as many batches as it holds: waits (GIL released) for the first batch only, then
  // takes what has arrived without waiting (targets that have try_consume; others one batch
  // per call). A batch that does not fit is continued by the next call. Returns the rows
  // written: 0 only at the end of the flow. An error after some rows were written is raised by
  // the next call, so that no written row goes unreported.
  std::size_t consume_into(nb::handle array, std::int64_t timeout_ms) {
    check(take_error());
    Py_buffer view{};
    if (PyObject_GetBuffer(array.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0)
      throw nb::python_error();
    const std::size_t width = schema.tuple_bytes();
    const std::size_t capacity = static_cast<std::size_t>(view.len) / width;
    auto* out = static_cast<std::byte*>(view.buf);
    std::size_t rows = 0;
    Status status;
    {
      nb::gil_scoped_release release;
      while (rows < capacity) {
        if (taken == batch.count) {
          if (target.end()) break;
          if (rows == 0) {
            status = target.consume(batch, milliseconds(timeout_ms));
          } else if constexpr (requires { target.try_consume(batch); }) {
            status = target.try_consume(batch);
          } else {
            break;
          }
          taken = 0;  // a new batch, or an empty one (consume resets it, also when it fails)
          if (status.code() == Errc::retry) status = Status();  // nothing more there yet
          if (!status || batch.empty()) break;
        }
        const std::size_t n = std::min(batch.count - taken, capacity - rows);
        std::memcpy(out + rows * width, batch.data + taken * width, n * width);
        rows += n;
        taken += n;
      }
    }
    PyBuffer_Release(&view);
    if (!status) {
      if (rows == 0) check(status);
      error = std::move(status);
    }
    return rows;
  }

  Status take_error() { return std::exchange(error, Status()); }

  std::string name;
  flow::Schema schema;  // of the tuples consume hands out
  Target target;
  flow::TupleBatch batch;
  std::size_t taken = 0;  // rows of `batch` handed out (consume_into may leave some)
  Status error;           // raised by the next call (consume_into had rows to return first)
};

using ShuffleTargetBox = TargetBox<flow::ShuffleTarget>;
using ReplicateTargetBox = TargetBox<flow::ReplicateTarget>;
using CombinerTargetBox = TargetBox<flow::CombinerTarget>;

struct BarrierBox {
  BarrierBox(cluster::Node& node, const std::string& name, int thread, milliseconds open_timeout)
      : worker(std::make_unique<fabric::Worker>(node.fabric(), "python barrier member " +
                                                                   std::to_string(thread) + " of " + name)),
        barrier(std::make_unique<flow::Barrier>(node, *worker, name, thread, open_timeout)) {}
  std::unique_ptr<fabric::Worker> worker;
  std::unique_ptr<flow::Barrier> barrier;
};

flow::Mode parse_mode(const std::string& mode) {
  if (mode == "bandwidth") return flow::Mode::bandwidth;
  if (mode == "latency") return flow::Mode::latency;
  throw Error(Errc::invalid_argument, "mode must be 'bandwidth' or 'latency', not '" + mode + "'");
}

flow::Routing parse_routing(const std::string& routing) {
  if (routing == "key_hash") return flow::Routing::key_hash;
  if (routing == "explicit") return flow::Routing::explicit_target;
  throw Error(Errc::invalid_argument,
              "routing must be 'key_hash' or 'explicit' (a routing function per tuple would call "
              "Python per tuple; route in NumPy and push_to instead), not '" + routing + "'");
}

flow::Replication parse_replication(const std::string& replication) {
  if (replication == "naive") return flow::Replication::naive;
  if (replication == "relay") return flow::Replication::relay;
  throw Error(Errc::invalid_argument, "replication must be 'naive' or 'relay', not '" + replication + "'");
}

using Members = std::vector<std::pair<int, int>>;

// Builds and publishes a spec; the keyword defaults live in dfi/__init__.py.
void create_flow(cluster::Node& node, const std::string& name, const std::string& type,
                 const Members& sources, const Members& targets, const std::string& schema,
                 const std::string& key, const std::string& routing, const std::string& mode,
                 std::uint32_t segments, std::uint32_t segment_bytes, std::int64_t stall_timeout_ms,
                 const std::string& aggregates, const std::string& replication, std::uint32_t fanout,
                 bool ordered, std::int64_t gap_timeout_ms) {
  flow::FlowSpec spec;
  spec.name = name;
  for (auto [rank, thread] : sources) spec.sources.push_back({rank, thread});
  for (auto [rank, id] : targets) spec.targets.push_back({rank, id});
  spec.schema = flow::Schema::parse(schema);
  spec.key_column = key;
  spec.options.mode = parse_mode(mode);
  spec.options.segments = segments;
  spec.options.segment_bytes = segment_bytes;
  spec.options.stall_timeout = milliseconds(stall_timeout_ms);
  if (type == "shuffle") {
    spec.type = flow::FlowType::shuffle;
    spec.routing = parse_routing(routing);
  } else if (type == "replicate") {
    spec.type = flow::FlowType::replicate;
    spec.type_options = flow::ReplicateOptions{.replication = parse_replication(replication),
                                               .fanout = fanout,
                                               .ordered = ordered,
                                               .gap_timeout = milliseconds(gap_timeout_ms)};
  } else if (type == "combiner") {
    spec.type = flow::FlowType::combiner;
    spec.type_options = flow::CombinerOptions{.aggregates = flow::parse_aggregates(aggregates)};
  } else {
    throw Error(Errc::invalid_argument, "flow '" + name + "': type must be 'shuffle', 'replicate' or "
                                        "'combiner', not '" + type + "'");
  }
  nb::gil_scoped_release release;
  flow::create_flow(node, spec);
}

// Binds class `name` whose constructor opens something by name: Box(node, name, index,
// open_timeout_ms) runs `open(self, node, name, index, timeout)` with the GIL released (opening
// waits for the registry), and the object keeps the node alive.
template <class Box, class Open>
nb::class_<Box> bind_open(nb::module_& m, const char* name, Open open) {
  nb::class_<Box> cls(m, name);
  cls.def(
      "__init__",
      [open](Box* self, cluster::Node& node, const std::string& flow_name, int index,
             std::int64_t open_timeout_ms) {
        nb::gil_scoped_release release;
        open(self, node, flow_name, index, milliseconds(open_timeout_ms));
      },
      nb::keep_alive<1, 2>(), "node"_a, "name"_a, "index"_a = 0, "open_timeout_ms"_a = 0);
  return cls;
}

template <class Box>
void bind_source_common(nb::class_<Box>& cls) {
  cls.def("_push", &Box::push, "array"_a)
      .def("flush", [](Box& b) { check(b.source->flush()); }, Release())
      .def("close", [](Box& b) { check(b.source->close()); }, Release())
      .def_prop_ro("_layout", [](const Box& b) { return layout_of(b.spec.schema); })
      .def_ro("name", &Box::name);
}

template <class Box>
void bind_target_common(nb::class_<Box>& cls) {
  cls.def("_consume",
          [](nb::handle self, std::int64_t timeout_ms) {
            return nb::cast<Box&>(self).consume(self, timeout_ms);
          },
          "timeout_ms"_a = 0)
      .def("_consume_into", &Box::consume_into, "array"_a, "timeout_ms"_a = 0)
      .def_prop_ro("end", [](const Box& b) { return b.target.end(); })
      .def_prop_ro("_layout", [](const Box& b) { return layout_of(b.schema); })
      .def_ro("name", &Box::name);
}

}  // namespace
}  // namespace dfi::python

NB_MODULE(_dfi, m) {
  using namespace dfi;
  using namespace dfi::python;
  m.doc() = "Native half of the DFI bindings; use the dfi package.";
  m.attr("version") = DFI_VERSION_STRING;

  nb::enum_<Errc>(m, "Errc")
      .value("ok", Errc::ok)
      .value("retry", Errc::retry)
      .value("gap", Errc::gap)
      .value("timeout", Errc::timeout)
      .value("invalid_argument", Errc::invalid_argument)
      .value("not_found", Errc::not_found)
      .value("already_exists", Errc::already_exists)
      .value("protocol", Errc::protocol)
      .value("io", Errc::io)
      .value("peer_failed", Errc::peer_failed)
      .value("flow_failed", Errc::flow_failed)
      .value("fatal", Errc::fatal);

  m.def("_set_error_class", [](nb::handle cls) {
    Py_XINCREF(cls.ptr());
    error_class = cls.ptr();
  });
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      if (error_class == nullptr) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return;
      }
      nb::object args = nb::make_tuple(nb::cast(e.code()), nb::str(e.what()));
      PyErr_SetObject(error_class, args.ptr());
    }
  });

  nb::class_<cluster::Node>(m, "Node")
      .def("__init__",
           [](cluster::Node* self) {
             nb::gil_scoped_release release;
             new (self) cluster::Node();
           })
      .def_prop_ro("rank", &cluster::Node::rank)
      .def_prop_ro("size", &cluster::Node::size)
      .def("barrier", &cluster::Node::barrier, "name"_a, Release())
      .def("finish", &cluster::Node::finish, Release())
      .def("failed_ranks", &cluster::Node::failed_ranks)
      .def("publish", [](cluster::Node& node, const std::string& name, const std::string& value) {
        node.registry().publish(name, value);
      }, Release())
      .def("wait_for", [](cluster::Node& node, const std::string& name, std::int64_t timeout_ms) {
        return node.wait_for(name, milliseconds(timeout_ms));
      }, "name"_a, "timeout_ms"_a = 0, Release());

  m.def("_create_flow", &create_flow);
  m.def("_create_barrier", [](cluster::Node& node, const std::string& name, const Members& members) {
    std::vector<flow::SourceRef> refs;
    for (auto [rank, thread] : members) refs.push_back({rank, thread});
    nb::gil_scoped_release release;
    flow::create_barrier(node, name, refs);
  });

  // Sources: a flow name, this rank's source thread, an open timeout.
  auto shuffle_source = bind_open<ShuffleSourceBox>(
      m, "_ShuffleSource", [](ShuffleSourceBox* self, cluster::Node& node, const std::string& name, int thread,
                              milliseconds timeout) {
        flow::SourceOptions options;
        options.open_timeout = timeout;
        new (self) ShuffleSourceBox(node, name, thread, flow::FlowType::shuffle, timeout, std::move(options));
      });
  bind_source_common(shuffle_source);
  shuffle_source
      .def("_push_to",
           [](ShuffleSourceBox& b, std::size_t target, nb::handle array) {
             const std::size_t width = b.spec.schema.tuple_bytes();
             Buffer buffer(array, width, b.name);
             nb::gil_scoped_release release;
             for (std::size_t at = 0; at < buffer.bytes(); at += width) {
               check(b.source->push_to(target, buffer.data() + at, width));
             }
           })
      .def_prop_ro("target_count", [](const ShuffleSourceBox& b) { return b.source->target_count(); });

  auto replicate_source = bind_open<ReplicateSourceBox>(
      m, "_ReplicateSource", [](ReplicateSourceBox* self, cluster::Node& node, const std::string& name,
                                int thread, milliseconds timeout) {
        flow::ReplicateSourceOptions options;
        options.open_timeout = timeout;
        new (self) ReplicateSourceBox(node, name, thread, flow::FlowType::replicate, timeout, std::move(options));
      });
  bind_source_common(replicate_source);

  auto combiner_source = bind_open<CombinerSourceBox>(
      m, "_CombinerSource", [](CombinerSourceBox* self, cluster::Node& node, const std::string& name,
                               int thread, milliseconds timeout) {
        flow::CombinerSourceOptions options;
        options.open_timeout = timeout;
        new (self) CombinerSourceBox(node, name, thread, flow::FlowType::combiner, timeout, std::move(options));
      });
  bind_source_common(combiner_source);

  // Targets: a flow name, this rank's target id, an open timeout; the schema of what they hand
  // out (the flow's, or the combiner's result schema).
  auto shuffle_target = bind_open<ShuffleTargetBox>(
      m, "_ShuffleTarget", [](ShuffleTargetBox* self, cluster::Node& node, const std::string& name, int id,
                              milliseconds timeout) {
        flow::FlowSpec spec = lookup_spec(node, name, flow::FlowType::shuffle, timeout);
        new (self) ShuffleTargetBox(name, spec.schema, node, name, id, std::nullopt, timeout);
      });
  bind_target_common(shuffle_target);

  auto replicate_target = bind_open<ReplicateTargetBox>(
      m, "_ReplicateTarget", [](ReplicateTargetBox* self, cluster::Node& node, const std::string& name, int id,
                                milliseconds timeout) {
        flow::FlowSpec spec = lookup_spec(node, name, flow::FlowType::replicate, timeout);
        flow::ReplicateTargetOptions options;
        options.open_timeout = timeout;
        new (self) ReplicateTargetBox(name, spec.schema, node, name, id, std::move(options));
      });
  bind_target_common(replicate_target);

  auto combiner_target = bind_open<CombinerTargetBox>(
      m, "_CombinerTarget", [](CombinerTargetBox* self, cluster::Node& node, const std::string& name, int id,
                               milliseconds timeout) {
        flow::FlowSpec spec = lookup_spec(node, name, flow::FlowType::combiner, timeout);
        new (self) CombinerTargetBox(name, flow::combiner_result_schema(spec), node, name, id, std::nullopt,
                                     timeout);
      });
  bind_target_common(combiner_target);

  auto barrier = bind_open<BarrierBox>(
      m, "Barrier", [](BarrierBox* self, cluster::Node& node, const std::string& name, int thread,
                       milliseconds timeout) { new (self) BarrierBox(node, name, thread, timeout); });
  barrier
      .def("wait",
           [](BarrierBox& b, std::int64_t timeout_ms) { check(b.barrier->wait(milliseconds(timeout_ms))); },
           "timeout_ms"_a = 0, Release())
      .def_prop_ro("rounds", [](const BarrierBox& b) { return b.barrier->rounds(); });
}
