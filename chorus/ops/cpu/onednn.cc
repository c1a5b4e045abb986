// oneDNN plumbing: engine, per-thread streams and scratchpads, the cache registry.
#ifdef CHORUS_WITH_DNNL

#include <chorus/ops/cpu/onednn.h>

namespace chorus::ops::cpu::onednn {

dnnl::engine& engine() {
  static dnnl::engine* e = guarded("engine", [] { return new dnnl::engine(dnnl::engine::kind::cpu, 0); });
  return *e;  // never destroyed: primitives in static caches may outlive any other static
}

dnnl::stream& stream() {
  thread_local dnnl::stream s = guarded("stream", [] { return dnnl::stream(engine()); });
  return s;
}

namespace {

// 64-byte aligned, grow-only buffer.
struct ScratchBuffer {
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte[], Free> data;
  std::size_t size = 0;

  void* reserve(std::size_t bytes) {
    if (bytes > size) {
      data.reset(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{64})));
      size = bytes;
    }
    return data.get();
  }
};

}  // namespace

void* thread_buffer(BufferSlot slot, std::size_t bytes) {
  thread_local ScratchBuffer buffers[2];
  return buffers[static_cast<int>(slot)].reserve(bytes > 0 ? bytes : 64);
}

dnnl::memory scratchpad(const dnnl::primitive_desc_base& pd) {
  const dnnl::memory::desc md = pd.scratchpad_desc();
  return dnnl::memory(md, engine(), thread_buffer(BufferSlot::kScratchpad, md.get_size()));
}

void execute(const dnnl::primitive& prim, const std::unordered_map<int, dnnl::memory>& args) {
  prim.execute(stream(), args);
  stream().wait();
}

dnnl::memory::data_type data_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return dnnl::memory::data_type::f32;
    case DType::kBFloat16: return dnnl::memory::data_type::bf16;
    case DType::kFloat16: return dnnl::memory::data_type::f16;
    default: break;
  }
  throw InternalError(internal::str_cat("oneDNN kernels take float32, bfloat16 or float16, got ", dtype_name(dtype)));
}

bool usable(DType dtype, const dnnl::primitive_desc_base& pd) {
  if (dtype == DType::kFloat32) return true;
  const std::string impl = pd.impl_info_str();
  return impl.rfind("ref", 0) != 0;  // "ref:any", "ref_int8:any", ... : oneDNN's reference loops
}

dnnl::primitive_attr default_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

CacheRegistry& CacheRegistry::instance() {
  static CacheRegistry* r = new CacheRegistry;  // outlives the caches that registered with it
  return *r;
}

void CacheRegistry::add(std::function<CacheStats()> stats) {
  std::lock_guard<std::mutex> lock(mu_);
  sources_.push_back(std::move(stats));
}

CacheStats CacheRegistry::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  CacheStats t;
  for (const auto& f : sources_) {
    const CacheStats s = f();
    t.hits += s.hits;
    t.misses += s.misses;
    t.entries += s.entries;
  }
  return t;
}

}  // namespace chorus::ops::cpu::onednn

#endif  // CHORUS_WITH_DNNL
