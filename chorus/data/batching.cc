// The batching transformations beside batch (transformations.cc): padded_batch and unbatch.
#include <algorithm>
#include <cstring>

#include <chorus/core/error.h>
#include <chorus/data/dataset.h>
#include <chorus/data/internal.h>

namespace chorus::data {

using chorus::internal::str_cat;
using internal::input_prefix;

namespace internal {

void check_batch_structure(const char* op, const std::vector<Element>& rows, bool same_shape) {
  const Element& first = rows.at(0);
  const auto spec = [](const Tensor& t) { return str_cat(t.shape().to_string(), " ", dtype_name(t.dtype())); };
  for (std::size_t r = 1; r < rows.size(); ++r) {
    CHORUS_REQUIRE(rows[r].size() == first.size(), InvalidArgumentError, op, ": element ", r, " of the batch has ",
                   rows[r].size(), " components but element 0 has ", first.size(),
                   "; all elements of a batch must have the same components");
    for (std::size_t c = 0; c < first.size(); ++c) {
      const Tensor& a = first[c];
      const Tensor& b = rows[r][c];
      const bool ok =
          b.dtype() == a.dtype() && (same_shape ? b.shape() == a.shape() : b.shape().rank() == a.shape().rank());
      CHORUS_REQUIRE(ok, InvalidArgumentError, op, ": component ", c, " of element ", r, " of the batch is ", spec(b),
                     " but element 0's is ", spec(a),
                     same_shape ? "; batch needs the same dtype and shape in every element (padded_batch pads "
                                  "shapes that differ)"
                                : "; elements may differ only in the sizes of their dimensions");
    }
  }
}

}  // namespace internal

namespace {

using PaddedShape = std::vector<std::int64_t>;

// "(2, -1)": a padded shape may hold -1, which Shape refuses.
std::string dims_string(const std::vector<std::int64_t>& dims) {
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) s += str_cat(i ? ", " : "", dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

class PaddedBatchDataset final : public DatasetBase {
 public:
  PaddedBatchDataset(std::shared_ptr<const DatasetBase> input, std::int64_t batch,
                     std::optional<std::vector<PaddedShape>> shapes, std::optional<std::vector<Tensor>> values,
                     bool drop)
      : input_(std::move(input)), batch_(batch), shapes_(std::move(shapes)), values_(std::move(values)), drop_(drop) {
    CHORUS_REQUIRE(batch_ > 0, InvalidArgumentError, "padded_batch: batch_size must be > 0, got ", batch_);
    if (shapes_)
      for (std::size_t c = 0; c < shapes_->size(); ++c)
        for (std::int64_t d : (*shapes_)[c])
          CHORUS_REQUIRE(d >= -1, InvalidArgumentError, "padded_batch: padded_shapes[", c,
                         "] = ", dims_string((*shapes_)[c]), " has a dimension ", d,
                         "; each must be >= 0, or -1 (None) for the batch's largest");
    if (values_)
      for (std::size_t c = 0; c < values_->size(); ++c) {
        const Tensor& v = (*values_)[c];
        CHORUS_REQUIRE(v.defined(), InvalidArgumentError, "padded_batch: padding_values[", c, "] is undefined");
        CHORUS_REQUIRE(v.shape().rank() == 0, InvalidArgumentError, "padded_batch: padding_values[", c,
                       "] must be a scalar, got shape ", v.shape().to_string());
        Padding p;
        if (v.is_string()) {
          p.str = v.item<std::string>();
        } else {
          p.bytes.resize(dtype_size(v.dtype()));
          v.copy_to_host(p.bytes.data());
        }
        padding_.push_back(std::move(p));
      }
  }
  std::string name() const override { return "PaddedBatchDataset"; }
  std::int64_t cardinality() const override {
    return internal::batched_cardinality(input_->cardinality(), batch_, drop_);
  }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(std::shared_ptr<const PaddedBatchDataset> ds)
          : ds_(std::move(ds)), in_(ds_->input_->make_iterator()), device_(internal::pipeline_device()) {}
      std::optional<Element> next() override {
        std::vector<Element> rows;
        while (static_cast<std::int64_t>(rows.size()) < ds_->batch_) {
          auto e = in_->next();
          if (!e) break;
          rows.push_back(std::move(*e));
        }
        if (rows.empty() || (ds_->drop_ && static_cast<std::int64_t>(rows.size()) < ds_->batch_)) return std::nullopt;
        return ds_->pad(rows, device_);
      }
      void save(IteratorState& state, const std::string& prefix) override { in_->save(state, input_prefix(prefix)); }
      void restore(const IteratorState& state, const std::string& prefix) override {
        in_->restore(state, input_prefix(prefix));
      }

     private:
      std::shared_ptr<const PaddedBatchDataset> ds_;
      std::unique_ptr<IteratorBase> in_;
      std::string device_;
    };
    return std::make_unique<It>(std::static_pointer_cast<const PaddedBatchDataset>(shared_from_this()));
  }

 private:
  Element pad(const std::vector<Element>& rows, const std::string& device) const {
    internal::check_batch_structure("padded_batch", rows, /*same_shape=*/false);
    const std::size_t ncomp = rows[0].size();
    CHORUS_REQUIRE(!shapes_ || shapes_->size() == ncomp, InvalidArgumentError, "padded_batch: ", shapes_->size(),
                   " padded_shapes for elements of ", ncomp, " components");
    CHORUS_REQUIRE(!values_ || values_->size() == ncomp, InvalidArgumentError, "padded_batch: ", values_->size(),
                   " padding_values for elements of ", ncomp, " components");
    Element out;
    for (std::size_t c = 0; c < ncomp; ++c) {
      const Tensor& first = rows[0][c];
      const int rank = first.shape().rank();
      const DType dtype = first.dtype();
      // The padded shape: fixed dimensions as given, -1 (or no padded_shapes) the batch's largest.
      std::vector<std::int64_t> padded(static_cast<std::size_t>(rank), -1);
      if (shapes_) {
        const PaddedShape& want = (*shapes_)[c];
        CHORUS_REQUIRE(static_cast<int>(want.size()) == rank, InvalidArgumentError, "padded_batch: the padded shape ",
                       dims_string(want), " of component ", c, " is not compatible with the element shape ",
                       first.shape().to_string(), " (rank ", want.size(), " vs ", rank, ")");
        padded = want;
      }
      for (int d = 0; d < rank; ++d) {
        std::int64_t largest = 0;
        for (const Element& row : rows) largest = std::max(largest, row[c].shape().dims()[d]);
        if (padded[d] == -1) {
          padded[d] = largest;
        } else {
          CHORUS_REQUIRE(largest <= padded[d], InvalidArgumentError,
                         "padded_batch: attempted to pad to a smaller "
                         "size than the input element: component ",
                         c, " has dimension ", d, " of size ", largest, " but the padded shape is ",
                         dims_string(padded), " (TensorFlow 2.21 raises DataLossError here)");
        }
      }
      // The padding: 0 (false, "") unless padding_values gives one.
      Padding fill;
      if (values_) {
        const Tensor& v = (*values_)[c];
        CHORUS_REQUIRE(v.dtype() == dtype, InvalidArgumentError, "padded_batch: padding_values[", c, "] is ",
                       dtype_name(v.dtype()), " but component ", c, " is ", dtype_name(dtype));
        fill = padding_[c];
      } else if (dtype != DType::kString) {
        fill.bytes.assign(dtype_size(dtype), 0);
      }
      out.push_back(dtype == DType::kString ? stack_padded_strings(rows, c, padded, fill.str, device)
                                            : stack_padded(rows, c, padded, fill.bytes, device));
    }
    return out;
  }

  // Calls run(src, dst, n) for each innermost row of a tensor of shape `dims` placed at the
  // top-left corner of a padded slot of `padded` dims: n elements from element `src` of the
  // tensor go to element `dst` of the slot (row-major offsets).
  template <typename Run>
  static void for_each_run(const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& padded, Run&& run) {
    const int rank = static_cast<int>(padded.size());
    if (rank == 0) return run(0, 0, 1);
    std::vector<std::int64_t> stride(static_cast<std::size_t>(rank), 1);  // of the padded slot, in elements
    for (int d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * padded[d + 1];
    const std::int64_t row_len = dims[rank - 1];
    const std::int64_t nrows = row_len == 0 ? 0 : Shape(dims).num_elements() / row_len;
    std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);  // over dims[0..rank-2]
    for (std::int64_t k = 0; k < nrows; ++k) {
      std::int64_t offset = 0;
      for (int d = 0; d < rank - 1; ++d) offset += index[d] * stride[d];
      run(k * row_len, offset, row_len);
      for (int d = rank - 2; d >= 0; --d) {
        if (++index[d] < dims[d]) break;
        index[d] = 0;
      }
    }
  }

  static std::vector<std::int64_t> batched_shape(std::size_t rows, const std::vector<std::int64_t>& padded) {
    std::vector<std::int64_t> shape{static_cast<std::int64_t>(rows)};
    shape.insert(shape.end(), padded.begin(), padded.end());
    return shape;
  }

  // [rows, padded...]: each row's bytes at the top-left corner of its slot, `fill` elsewhere.
  static Tensor stack_padded(const std::vector<Element>& rows, std::size_t c, const std::vector<std::int64_t>& padded,
                             const std::vector<std::uint8_t>& fill, const std::string& device) {
    const std::size_t esize = fill.size();
    const std::int64_t slot = Shape(padded).num_elements();
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(slot) * rows.size() * esize);
    for (std::size_t i = 0; i < bytes.size(); i += esize) std::memcpy(bytes.data() + i, fill.data(), esize);
    std::vector<std::uint8_t> src;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const Tensor& t = rows[r][c];
      src.resize(t.nbytes());
      if (!src.empty()) t.copy_to_host(src.data());
      std::uint8_t* base = bytes.data() + r * static_cast<std::size_t>(slot) * esize;
      for_each_run(t.shape().dims(), padded, [&](std::int64_t from, std::int64_t to, std::int64_t n) {
        std::memcpy(base + to * esize, src.data() + from * esize, static_cast<std::size_t>(n) * esize);
      });
    }
    return Tensor::from_host(bytes.data(), Shape(batched_shape(rows.size(), padded)), rows[0][c].dtype(), device);
  }

  // The same for strings, on the pipeline's host device.
  static Tensor stack_padded_strings(const std::vector<Element>& rows, std::size_t c,
                                     const std::vector<std::int64_t>& padded, const std::string& fill,
                                     const std::string& device) {
    const std::int64_t slot = Shape(padded).num_elements();
    Tensor out =
        Tensor::empty(Shape(batched_shape(rows.size(), padded)), DType::kString, internal::host_device_for(device));
    const std::span<std::string> dst = out.mutable_strings();
    if (!fill.empty()) std::fill(dst.begin(), dst.end(), fill);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const Tensor& t = rows[r][c];
      const std::span<const std::string> src = t.strings();
      std::string* base = dst.data() + r * static_cast<std::size_t>(slot);
      for_each_run(t.shape().dims(), padded, [&](std::int64_t from, std::int64_t to, std::int64_t n) {
        std::copy_n(src.begin() + from, n, base + to);
      });
    }
    return out;
  }

  // A padding value: bytes of one numeric element, or a string.
  struct Padding {
    std::vector<std::uint8_t> bytes;
    std::string str;
  };

  std::shared_ptr<const DatasetBase> input_;
  std::int64_t batch_;
  std::optional<std::vector<PaddedShape>> shapes_;
  std::optional<std::vector<Tensor>> values_;
  std::vector<Padding> padding_;
  bool drop_;
};

class UnbatchDataset final : public DatasetBase {
 public:
  explicit UnbatchDataset(std::shared_ptr<const DatasetBase> input) : input_(std::move(input)) {}
  std::string name() const override { return "UnbatchDataset"; }
  // TF knows it from the static batch dimension; chorus datasets carry no shapes.
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    return n == 0 ? 0 : n == kInfiniteCardinality ? kInfiniteCardinality : kUnknownCardinality;
  }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(std::unique_ptr<IteratorBase> in) : in_(std::move(in)) {}
      std::optional<Element> next() override {
        while (!current_ || row_ >= rows_) {
          current_.reset();
          auto e = in_->next();
          if (!e) return std::nullopt;
          set_current(std::move(*e), 0);
        }
        Element out;
        for (const Tensor& c : *current_) out.push_back(internal::slice_row(c, row_));
        ++row_;
        return out;
      }
      void save(IteratorState& state, const std::string& prefix) override {
        in_->save(state, input_prefix(prefix));
        state.set_int(prefix + "unbatch.has_current", current_.has_value());
        if (current_) {
          internal::save_element(state, prefix + "unbatch.current", *current_);
          state.set_int(prefix + "unbatch.row", row_);
        }
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        in_->restore(state, input_prefix(prefix));
        current_.reset();
        if (state.get_int(prefix + "unbatch.has_current") != 0) {
          set_current(internal::load_element(state, prefix + "unbatch.current"), state.get_int(prefix + "unbatch.row"));
          CHORUS_REQUIRE(row_ >= 0 && row_ <= rows_, InvalidArgumentError, "iterator state: unbatch row ", row_,
                         " is outside [0, ", rows_, "]");
        }
      }

     private:
      void set_current(Element e, std::int64_t row) {
        CHORUS_REQUIRE(!e.empty(), InvalidArgumentError, "unbatch: an element with no components");
        for (std::size_t c = 0; c < e.size(); ++c) {
          CHORUS_REQUIRE(e[c].shape().rank() >= 1, InvalidArgumentError,
                         "unbatch: cannot unbatch an input with scalar components (component ", c, ")");
          CHORUS_REQUIRE(e[c].shape().dims()[0] == e[0].shape().dims()[0], InvalidArgumentError,
                         "unbatch: input element must have the same batch size in each component. Component 0 had "
                         "size ",
                         e[0].shape().dims()[0], " but component ", c, " had size ", e[c].shape().dims()[0]);
        }
        rows_ = e[0].shape().dims()[0];
        row_ = row;
        current_ = std::move(e);
      }
      std::unique_ptr<IteratorBase> in_;
      std::optional<Element> current_;  // the batch being split
      std::int64_t rows_ = 0, row_ = 0;
    };
    return std::make_unique<It>(input_->make_iterator());
  }

 private:
  std::shared_ptr<const DatasetBase> input_;
};

}  // namespace

Dataset Dataset::padded_batch(std::int64_t batch_size,
                              std::optional<std::vector<std::vector<std::int64_t>>> padded_shapes,
                              std::optional<std::vector<Tensor>> padding_values, bool drop_remainder) const {
  return Dataset(std::make_shared<PaddedBatchDataset>(get().shared_from_this(), batch_size, std::move(padded_shapes),
                                                      std::move(padding_values), drop_remainder));
}
Dataset Dataset::unbatch() const { return Dataset(std::make_shared<UnbatchDataset>(get().shared_from_this())); }

}  // namespace chorus::data
