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
#include <optional>
#include <span>
#include <sstream>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dfi/cluster/node.hpp"
#include "dfi/common/error.hpp"
#include "dfi/driven/consumer.hpp"
#include "dfi/driven/flow.hpp"
#include "dfi/driven/mover.hpp"
#include "dfi/driven/producer.hpp"
#include "dfi/fabric/worker.hpp"
#include "dfi/flow/barrier.hpp"
#include "dfi/flow/columns.hpp"
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

// "flow 'x': " + what, built without `literal + std::to_string` (GCC 12's false -Wrestrict).
template <class... Parts>
std::string flow_message(const std::string& flow, const Parts&... parts) {
  std::ostringstream out;
  out << "flow '" << flow << "': ";
  (out << ... << parts);
  return out.str();
}

// A Python buffer (NumPy array, bytes, ...) held while C++ reads or writes it; released with
// the GIL held (declare it before any gil_scoped_release of the same scope).
class View {
 public:
  View(nb::handle object, int flags) {
    if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) throw nb::python_error();
  }
  ~View() { PyBuffer_Release(&view_); }
  View(const View&) = delete;
  View& operator=(const View&) = delete;

  std::byte* data() const { return static_cast<std::byte*>(view_.buf); }
  std::size_t bytes() const { return static_cast<std::size_t>(view_.len); }
  std::size_t itemsize() const { return static_cast<std::size_t>(view_.itemsize); }
  int ndim() const { return view_.ndim; }
  std::size_t length() const { return view_.ndim == 0 ? 1 : static_cast<std::size_t>(view_.shape[0]); }
  std::ptrdiff_t stride() const { return view_.strides != nullptr ? view_.strides[0] : view_.itemsize; }

 private:
  Py_buffer view_{};
};

// The columns of a batch, one buffer per schema column in schema order (a Python list; None for
// a column not wanted, consume side only): one-dimensional, values of the column's width, any
// stride, all of one length. The Python half checked the dtypes.
class ColumnViews {
 public:
  ColumnViews(nb::handle list, const flow::Schema& schema, const std::string& flow, bool writable) {
    const nb::list columns = nb::borrow<nb::list>(list);
    if (columns.size() != schema.column_count())
      throw Error(Errc::invalid_argument, flow_message(flow, columns.size(), " columns for a schema of ",
                                                       schema.column_count()));
    bool first = true;
    for (std::size_t c = 0; c < columns.size(); ++c) {
      nb::handle column = columns[c];
      if (column.is_none()) {
        if (!writable) throw Error(Errc::invalid_argument, flow_message(flow, "column ", c, " is missing"));
        refs_.push_back({});
        continue;
      }
      auto& view = views_.emplace_back(std::make_unique<View>(column, writable ? PyBUF_RECORDS : PyBUF_RECORDS_RO));
      if (view->ndim() != 1 || view->itemsize() != schema.column_bytes(c)) {
        throw Error(Errc::invalid_argument, flow_message(flow, "column '", schema.column(c).name,
                                                         "' must be one-dimensional with ", schema.column_bytes(c),
                                                         "-byte values"));
      }
      if (first) rows_ = view->length();
      if (view->length() != rows_) {
        throw Error(Errc::invalid_argument, flow_message(flow, "column '", schema.column(c).name, "' has ",
                                                         view->length(), " rows, the first column ", rows_));
      }
      first = false;
      refs_.push_back({view->data(), view->stride()});
      const_refs_.push_back({view->data(), view->stride()});
    }
  }
  std::size_t rows() const { return rows_; }
  std::span<const flow::ColumnRef> refs() const { return const_refs_; }  // push side: no None
  std::span<const flow::MutableColumnRef> mutable_refs() const { return refs_; }

 private:
  std::vector<std::unique_ptr<View>> views_;
  std::vector<flow::MutableColumnRef> refs_;
  std::vector<flow::ColumnRef> const_refs_;
  std::size_t rows_ = 0;
};

// What a push takes: rows (a C-contiguous buffer of whole rows) or columns (a list of buffers,
// ColumnViews). Holds the buffers for the duration of the push.
class Input {
 public:
  Input(nb::handle data, const flow::Schema& schema, const std::string& flow) : schema_(schema) {
    if (nb::isinstance<nb::list>(data)) {
      columns_.emplace(data, schema, flow, false);
      rows_ = columns_->rows();
      return;
    }
    rows_view_.emplace(data, PyBUF_C_CONTIGUOUS);
    const std::size_t width = schema.tuple_bytes();
    if (width == 0 || rows_view_->bytes() % width != 0) {
      throw Error(Errc::invalid_argument, flow_message(flow, "a buffer of ", rows_view_->bytes(),
                                                       " bytes is not a whole number of ", width, "-byte tuples"));
    }
    rows_ = rows_view_->bytes() / width;
  }
  std::size_t rows() const { return rows_; }
  bool columnar() const { return columns_.has_value(); }
  const std::byte* row_data() const { return rows_view_->data(); }
  std::span<const flow::ColumnRef> columns() const { return columns_->refs(); }
  // Rows [first, first + n) in row layout: in place for rows, interleaved into `staging` for
  // columns.
  const std::byte* rows_at(std::size_t first, std::size_t n, std::byte* staging) const {
    if (!columnar()) return rows_view_->data() + first * schema_.tuple_bytes();
    flow::interleave_columns(schema_, columns(), first, n, staging);
    return staging;
  }
  // Row first + i into row slot[i] of `staging`.
  void to_slots(std::size_t first, std::size_t n, const std::uint32_t* slot, std::byte* staging) const {
    const std::size_t width = schema_.tuple_bytes();
    if (columnar()) {
      flow::interleave_columns_to(schema_, columns(), first, n, slot, staging);
    } else {
      flow::scatter_rows(rows_view_->data() + first * width, width, n, slot, staging);
    }
  }

 private:
  const flow::Schema& schema_;
  std::optional<View> rows_view_;
  std::optional<ColumnViews> columns_;
  std::size_t rows_ = 0;
};

// How each source type takes a run of whole rows, and a run for one target: push_batch where the
// type has it; a driven producer's rings take tuples one by one (push, push_to per row, in C++).
Status push_rows(flow::ShuffleSource& s, const std::byte* rows, std::size_t bytes, std::size_t) {
  return s.push_batch(rows, bytes);
}
Status push_rows(flow::ReplicateSource& s, const std::byte* rows, std::size_t bytes, std::size_t width) {
  return s.push_bulk(rows, bytes / width);
}
Status push_rows(flow::CombinerSource& s, const std::byte* rows, std::size_t bytes, std::size_t width) {
  return s.push_bulk(rows, bytes / width);
}
Status push_rows(driven::Producer& p, const std::byte* rows, std::size_t bytes, std::size_t width) {
  for (std::size_t at = 0; at < bytes; at += width) {
    if (Status s = p.push(rows + at, width); !s) return s;
  }
  return {};
}
Status push_rows_to(flow::ShuffleSource& s, std::size_t target, const std::byte* rows, std::size_t bytes,
                    std::size_t) {
  return s.push_batch_to(target, rows, bytes);
}
Status push_rows_to(driven::Producer& p, std::size_t target, const std::byte* rows, std::size_t bytes,
                    std::size_t width) {
  for (std::size_t at = 0; at < bytes; at += width) {
    if (Status s = p.push_to(target, rows + at, width); !s) return s;
  }
  return {};
}

// Routing by an array of targets (push_to with one target per row): chunk by chunk, the targets
// are checked and counted; a chunk whose rows come in long runs of one target is pushed run by
// run (rows in place), any other chunk is grouped by target into the staging rows in one pass (a
// stable counting sort: per target, rows keep their order) and pushed one run per target. Sized
// when the source opens; nothing is allocated per push.
class Router {
 public:
  // A chunk whose runs average this many rows or more is pushed run by run.
  static constexpr std::size_t kLongRun = 32;

  Router(std::size_t targets, std::size_t chunk_rows) : count_(targets), slot_(chunk_rows) {}

  template <class Push>
  Status route(const std::string& flow, const View& targets, bool is_signed, const Input& input,
               std::byte* staging, std::size_t width, Push&& push_to) {
    switch (targets.itemsize() * 2 + (is_signed ? 1 : 0)) {
      case 2: return route_as<std::uint8_t>(flow, targets, input, staging, width, push_to);
      case 3: return route_as<std::int8_t>(flow, targets, input, staging, width, push_to);
      case 4: return route_as<std::uint16_t>(flow, targets, input, staging, width, push_to);
      case 5: return route_as<std::int16_t>(flow, targets, input, staging, width, push_to);
      case 8: return route_as<std::uint32_t>(flow, targets, input, staging, width, push_to);
      case 9: return route_as<std::int32_t>(flow, targets, input, staging, width, push_to);
      case 16: return route_as<std::uint64_t>(flow, targets, input, staging, width, push_to);
      case 17: return route_as<std::int64_t>(flow, targets, input, staging, width, push_to);
      default:
        return {Errc::invalid_argument, flow_message(flow, "targets must be an integer array, not ",
                                                     targets.itemsize(), "-byte values")};
    }
  }

 private:
  template <class T, class Push>
  Status route_as(const std::string& flow, const View& view, const Input& input, std::byte* staging,
                  std::size_t width, Push& push_to) {
    const T* targets = reinterpret_cast<const T*>(view.data());
    const std::size_t rows = input.rows();
    const std::size_t n_targets = count_.size();
    for (std::size_t first = 0; first < rows; first += slot_.size()) {
      const std::size_t n = std::min(slot_.size(), rows - first);
      const T* t = targets + first;
      std::fill(count_.begin(), count_.end(), 0);
      std::size_t runs = 0;
      for (std::size_t i = 0; i < n; ++i) {
        // Negative values wrap to huge ones, so one comparison catches both.
        if (static_cast<std::uint64_t>(t[i]) >= n_targets) [[unlikely]] {
          return {Errc::invalid_argument,
                  flow_message(flow, "row ", first + i, " is routed to target ", static_cast<long long>(t[i]),
                               ", which does not exist (the flow has ", n_targets, ")")};
        }
        ++count_[static_cast<std::size_t>(t[i])];
        runs += i == 0 || t[i] != t[i - 1];
      }
      if (n >= runs * kLongRun) {
        const std::byte* rows_at = input.rows_at(first, n, staging);
        for (std::size_t i = 0; i < n;) {
          std::size_t j = i + 1;
          while (j < n && t[j] == t[i]) ++j;
          if (Status s = push_to(static_cast<std::size_t>(t[i]), rows_at + i * width, (j - i) * width); !s) return s;
          i = j;
        }
        continue;
      }
      std::size_t at = 0;
      for (std::size_t& c : count_) at += std::exchange(c, at);  // count_ becomes each target's start
      for (std::size_t i = 0; i < n; ++i) slot_[i] = static_cast<std::uint32_t>(count_[static_cast<std::size_t>(t[i])]++);
      input.to_slots(first, n, slot_.data(), staging);
      std::size_t begin = 0;  // count_[target] is now the end of its group
      for (std::size_t target = 0; target < n_targets; ++target) {
        const std::size_t group_end = count_[target];
        if (group_end > begin) {
          if (Status s = push_to(target, staging + begin * width, (group_end - begin) * width); !s) return s;
        }
        begin = group_end;
      }
    }
    return {};
  }

  std::vector<std::size_t> count_;   // per target
  std::vector<std::uint32_t> slot_;  // per row of a chunk
};

// One source of any type with the worker it runs on (the worker outlives the source; a driven
// producer needs none), the staging rows for columnar input and the router for target arrays.
template <class Source>
struct SourceBox {
  // `open(worker)` opens the source on `worker` (null when worker_label is empty).
  template <class Open>
  SourceBox(cluster::Node& node, const std::string& flow_name, const std::string& worker_label,
            flow::FlowType type, milliseconds open_timeout, Open open)
      : name(flow_name),
        spec(lookup_spec(node, flow_name, type, open_timeout)),
        worker(worker_label.empty() ? nullptr : std::make_unique<fabric::Worker>(node.fabric(), worker_label)),
        source(open(worker.get())),
        staging(spec.schema),
        router(spec.targets.size(), staging.rows()) {}

  std::size_t width() const { return spec.schema.tuple_bytes(); }

  // Every row of `data` (rows or columns) into the flow, routed as the flow routes.
  void push(nb::handle data) {
    Input input(data, spec.schema, name);
    nb::gil_scoped_release release;
    const std::size_t w = width();
    if (!input.columnar()) {
      check(push_rows(*source, input.row_data(), input.rows() * w, w));
      return;
    }
    check(flow::push_columns(spec.schema, input.columns(), input.rows(), staging,
                             [&](const std::byte* rows, std::size_t bytes) { return push_rows(*source, rows, bytes, w); }));
  }

  // Every row of `data` to target `target`.
  void push_to(std::size_t target, nb::handle data) {
    Input input(data, spec.schema, name);
    nb::gil_scoped_release release;
    const std::size_t w = width();
    auto to_target = [&](const std::byte* rows, std::size_t bytes) {
      return push_rows_to(*source, target, rows, bytes, w);
    };
    if (!input.columnar()) {
      check(to_target(input.row_data(), input.rows() * w));
      return;
    }
    check(flow::push_columns(spec.schema, input.columns(), input.rows(), staging, to_target));
  }

  // Row i of `data` to target targets[i] (a C-contiguous integer array of the rows' length).
  void push_routed(nb::handle targets, bool is_signed, nb::handle data) {
    Input input(data, spec.schema, name);
    View view(targets, PyBUF_C_CONTIGUOUS);
    if (view.length() != input.rows() || view.ndim() != 1) {
      throw Error(Errc::invalid_argument, flow_message(name, "targets has ", view.length(), " values for ",
                                                       input.rows(), " rows"));
    }
    nb::gil_scoped_release release;
    const std::size_t w = width();
    check(router.route(name, view, is_signed, input, staging.data(), w,
                       [&](std::size_t target, const std::byte* rows, std::size_t bytes) {
                         return push_rows_to(*source, target, rows, bytes, w);
                       }));
  }

  std::string name;
  flow::FlowSpec spec;
  std::unique_ptr<fabric::Worker> worker;
  std::unique_ptr<Source> source;
  flow::ColumnStaging staging;
  Router router;
};

using ShuffleSourceBox = SourceBox<flow::ShuffleSource>;
using ReplicateSourceBox = SourceBox<flow::ReplicateSource>;
using CombinerSourceBox = SourceBox<flow::CombinerSource>;
using ProducerBox = SourceBox<driven::Producer>;

using RawView = nb::ndarray<nb::numpy, const std::uint8_t, nb::ndim<1>>;

// The tuples of `batch` as a read-only uint8 NumPy array over the ring memory (no copy), which
// keeps `owner` (the target) alive; None for an empty batch (the end of the flow).
nb::object batch_view(const flow::TupleBatch& batch, nb::handle owner) {
  if (batch.empty()) return nb::none();
  const std::size_t shape[1] = {batch.count * batch.tuple_bytes};
  return nb::cast(RawView(reinterpret_cast<const std::uint8_t*>(batch.data), 1, shape, owner));
}

template <class Target>
struct TargetBox {
  template <class... Args>
  TargetBox(const std::string& flow_name, flow::Schema tuple_schema, Args&&... args)
      : name(flow_name), schema(std::move(tuple_schema)), target(std::forward<Args>(args)...) {}

  // Hands out the rest of the current batch (what consume_into or consume_columns left), as a
  // view.
  nb::object rest(nb::handle self) {
    flow::TupleBatch rest = batch;
    rest.data = batch.data + taken * batch.tuple_bytes;
    rest.count = batch.count - taken;
    taken = batch.count;
    return batch_view(rest, self);
  }

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
    return rest(self);
  }

  // As consume, but never waits: False when no batch is there yet (targets with try_consume).
  nb::object try_consume(nb::handle self) {
    check(take_error());
    if (taken == batch.count) {
      const Status status = target.try_consume(batch);  // never waits: the GIL stays
      taken = 0;
      if (status.code() == Errc::retry) return nb::bool_(false);
      check(status);
    }
    return rest(self);
  }

  // Copies rows out of the flow through `copy(rows, n, at)` (n rows at `rows`, to output row
  // `at`) into an output of `capacity` rows: waits (GIL released) for the first batch only, then
  // takes what has arrived without waiting (targets that have try_consume; others one batch per
  // call). A batch that does not fit is continued by the next call. Returns the rows written: 0
  // only at the end of the flow. An error after some rows were written is raised by the next
  // call, so that no written row goes unreported.
  template <class Copy>
  std::size_t collect(std::size_t capacity, std::int64_t timeout_ms, Copy&& copy) {
    check(take_error());
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
        copy(batch.data + taken * batch.tuple_bytes, n, rows);
        rows += n;
        taken += n;
      }
    }
    if (!status) {
      if (rows == 0) check(status);
      error = std::move(status);
    }
    return rows;
  }

  // Rows into `array` (writable, C-contiguous, whole rows; the Python half checked its dtype).
  // A shuffle target copies with ShuffleTarget::consume_into once no batch is held here.
  std::size_t consume_into(nb::handle array, std::int64_t timeout_ms) {
    View view(array, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE);
    const std::size_t width = schema.tuple_bytes();
    if constexpr (requires(std::size_t b) { target.consume_into(nullptr, 0, b, milliseconds(0)); }) {
      if (taken == batch.count && error.is_ok()) {
        std::size_t bytes = 0;
        Status status;
        {
          nb::gil_scoped_release release;
          status = target.consume_into(view.data(), view.bytes(), bytes, milliseconds(timeout_ms));
        }
        check(status);
        return bytes / width;
      }
    }
    std::byte* out = view.data();
    return collect(view.bytes() / width, timeout_ms, [&](const std::byte* rows, std::size_t n, std::size_t at) {
      std::memcpy(out + at * width, rows, n * width);
    });
  }

  // Rows into column arrays (a list in schema order, None for a column not wanted; each
  // writable, one-dimensional, of the column's width, any stride, all of one length).
  std::size_t consume_columns(nb::handle columns, std::int64_t timeout_ms) {
    ColumnViews views(columns, schema, name, true);
    const auto refs = views.mutable_refs();
    return collect(views.rows(), timeout_ms, [&](const std::byte* rows, std::size_t n, std::size_t at) {
      flow::copy_out_columns(schema, rows, n, refs, at);
    });
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
using ConsumerBox = TargetBox<driven::Consumer>;

struct MoverBox {
  explicit MoverBox(cluster::Node& node) : mover(node) {}
  driven::Mover mover;
};

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

driven::Pattern parse_pattern(const std::string& pattern) {
  if (pattern == "shuffle") return driven::Pattern::shuffle;
  if (pattern == "balance") return driven::Pattern::balance;
  if (pattern == "replicate") return driven::Pattern::replicate;
  throw Error(Errc::invalid_argument, "pattern must be 'shuffle', 'balance' or 'replicate', not '" + pattern + "'");
}

using Members = std::vector<std::pair<int, int>>;

// Builds and publishes a spec; the keyword defaults live in dfi/__init__.py.
void create_flow(cluster::Node& node, const std::string& name, const std::string& type,
                 const Members& sources, const Members& targets, const std::string& schema,
                 const std::string& key, const std::string& routing, const std::string& mode,
                 std::uint32_t segments, std::uint32_t segment_bytes, std::int64_t stall_timeout_ms,
                 const std::string& aggregates, const std::string& replication, std::uint32_t fanout,
                 bool ordered, std::int64_t gap_timeout_ms, const std::string& pattern, bool doorbell,
                 std::uint64_t batch_bytes, std::int64_t poll_interval_us, std::int64_t share) {
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
  } else if (type == "driven") {
    spec.type = driven::kDriven;
    spec.routing = parse_routing(routing);
    driven::DrivenOptions options;
    options.pattern = parse_pattern(pattern);
    options.doorbell = doorbell;
    if (batch_bytes != 0) options.batch_bytes = batch_bytes;
    options.poll_interval = std::chrono::microseconds(poll_interval_us);
    options.share = share;
    spec.type_options = options;
  } else {
    throw Error(Errc::invalid_argument, "flow '" + name + "': type must be 'shuffle', 'replicate', "
                                        "'combiner' or 'driven', not '" + type + "'");
  }
  nb::gil_scoped_release release;
  flow::create_flow(node, spec);
}

std::string worker_label(const char* role, int index, const std::string& flow) {
  std::ostringstream label;
  label << "python " << role << ' ' << index << " of " << flow;
  return label.str();
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
  cls.def("_push", &Box::push, "data"_a)
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
      .def("_consume_columns", &Box::consume_columns, "columns"_a, "timeout_ms"_a = 0)
      .def_prop_ro("end", [](const Box& b) { return b.target.end(); })
      .def_prop_ro("_layout", [](const Box& b) { return layout_of(b.schema); })
      .def_ro("name", &Box::name);
  if constexpr (requires(Box& b, flow::TupleBatch& t) { b.target.try_consume(t); }) {
    cls.def("_try_consume", [](nb::handle self) { return nb::cast<Box&>(self).try_consume(self); });
  }
}

// A source class of the flow layer (Source(node, worker, name, thread, Options)): opened with a
// worker of its own, which the Python thread that opens it owns.
template <class Source, class Options>
nb::class_<SourceBox<Source>> bind_flow_source(nb::module_& m, const char* name, flow::FlowType type) {
  using Box = SourceBox<Source>;
  auto cls = bind_open<Box>(m, name, [type](Box* self, cluster::Node& node, const std::string& flow_name,
                                            int thread, milliseconds timeout) {
    new (self) Box(node, flow_name, worker_label("source", thread, flow_name), type, timeout,
                   [&](fabric::Worker* worker) {
                     Options options;
                     options.open_timeout = timeout;
                     return std::make_unique<Source>(node, *worker, flow_name, thread, std::move(options));
                   });
  });
  bind_source_common(cls);
  return cls;
}

// push_to and push_routed: the sources that take an explicit target (shuffle, driven shuffle).
template <class Box>
void bind_source_targets(nb::class_<Box>& cls) {
  cls.def("_push_to", &Box::push_to, "target"_a, "data"_a)
      .def("_push_routed", &Box::push_routed, "targets"_a, "is_signed"_a, "data"_a);
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
  auto shuffle_source = bind_flow_source<flow::ShuffleSource, flow::SourceOptions>(m, "_ShuffleSource",
                                                                                  flow::FlowType::shuffle);
  bind_source_targets(shuffle_source);
  shuffle_source.def_prop_ro("target_count", [](const ShuffleSourceBox& b) { return b.source->target_count(); });
  bind_flow_source<flow::ReplicateSource, flow::ReplicateSourceOptions>(m, "_ReplicateSource",
                                                                        flow::FlowType::replicate);
  bind_flow_source<flow::CombinerSource, flow::CombinerSourceOptions>(m, "_CombinerSource",
                                                                      flow::FlowType::combiner);

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

  // Driven flows (include/dfi/driven): producers and consumers need no worker of their own; the
  // mover owns one (it belongs to the thread that created it).
  auto producer = bind_open<ProducerBox>(
      m, "_Producer", [](ProducerBox* self, cluster::Node& node, const std::string& name, int thread,
                         milliseconds timeout) {
        new (self) ProducerBox(node, name, std::string(), driven::kDriven, timeout, [&](fabric::Worker*) {
          return std::make_unique<driven::Producer>(node, name, thread, timeout);
        });
      });
  bind_source_common(producer);
  bind_source_targets(producer);
  producer.def_prop_ro("ring_count", [](const ProducerBox& b) { return b.source->ring_count(); });

  auto consumer = bind_open<ConsumerBox>(
      m, "_Consumer", [](ConsumerBox* self, cluster::Node& node, const std::string& name, int id,
                         milliseconds timeout) {
        flow::FlowSpec spec = lookup_spec(node, name, driven::kDriven, timeout);
        new (self) ConsumerBox(name, spec.schema, node, name, id, timeout);
      });
  bind_target_common(consumer);
  consumer.def("leave", [](ConsumerBox& b) { check(b.target.leave()); }, Release());

  nb::class_<MoverBox>(m, "_Mover")
      .def("__init__",
           [](MoverBox* self, cluster::Node& node) {
             nb::gil_scoped_release release;
             new (self) MoverBox(node);
           },
           nb::keep_alive<1, 2>(), "node"_a)
      .def("add_flow",
           [](MoverBox& b, const std::string& name, std::int64_t timeout_ms) {
             b.mover.add_flow(name, milliseconds(timeout_ms));
           },
           "name"_a, "timeout_ms"_a = 0, Release())
      .def("run", [](MoverBox& b, std::int64_t timeout_ms) { check(b.mover.run(milliseconds(timeout_ms))); },
           "timeout_ms"_a, Release())
      .def("step",
           [](MoverBox& b) {
             std::uint64_t moved = 0;
             check(b.mover.step(moved));
             return moved;
           },
           Release())
      .def_prop_ro("done", [](const MoverBox& b) { return b.mover.done(); })
      .def("_counters", [](const MoverBox& b) {
        const driven::MoverCounters& c = b.mover.counters();
        return std::make_tuple(c.segments, c.bytes, c.idle_steps, c.retries);
      });

  auto barrier = bind_open<BarrierBox>(
      m, "Barrier", [](BarrierBox* self, cluster::Node& node, const std::string& name, int thread,
                       milliseconds timeout) { new (self) BarrierBox(node, name, thread, timeout); });
  barrier
      .def("wait",
           [](BarrierBox& b, std::int64_t timeout_ms) { check(b.barrier->wait(milliseconds(timeout_ms))); },
           "timeout_ms"_a = 0, Release())
      .def_prop_ro("rounds", [](const BarrierBox& b) { return b.barrier->rounds(); });
}
