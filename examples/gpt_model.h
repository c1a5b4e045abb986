// The small decoder-only transformer (GPT) of examples/gpt_mirrored.cc, and its byte-level data,
// shared by the example, tests/model/gpt_parity_test.cc (the same model in tf_keras,
// tests/model/gpt_parity.py) and bench/train/gpt_bench.cc (tokens/s against TF/Keras and PyTorch).
//
//   auto scope = strategy.scope();
//   auto model = chorus::examples::gpt({.seq = 64, .layers = 2, .d_model = 128, .heads = 4});
//   auto train = chorus::examples::byte_windows(chorus::examples::read_corpus("/usr/share/common-licenses"), 64, 32);
//
// The model (Keras's functional API, every layer named, so that a tf_keras model built with the
// same names and call order has the same layer order and so the same checkpoint keys):
//   tokens (int32 [B, seq]) → "embedding" (TokenAndPositionEmbedding: token_emb "token" + pos_emb
//   "position", Embedding layers) → for b in 0..layers-1:
//     "block<b>_norm1" LayerNormalization → "block<b>_attention" MultiHeadAttention(heads,
//     key_dim = d_model / heads, use_causal_mask) → "block<b>_add1" Add (residual) →
//     "block<b>_norm2" LayerNormalization → "block<b>_mlp_up" Dense(4·d_model, gelu) →
//     "block<b>_mlp_down" Dense(d_model) → "block<b>_add2" Add (residual)
//   → "final_norm" LayerNormalization → "logits" Dense(vocab), float32 under any policy (Keras's
//   advice for the last layer of a mixed-precision model). Output: logits [B, seq, vocab].
// Initializers are Keras's defaults (Embedding uniform ±0.05, Dense and attention glorot_uniform,
// biases zeros, LayerNormalization gamma 1, beta 0). No dropout.
//
// Layers are created under the strategy whose scope is open (as in Keras). Errors are the layers'
// own (model/layers.h): d_model not a multiple of heads → InvalidArgumentError from gpt().
// Header-only; not part of the installed library (examples/, tests/ and bench/ include it).
#pragma once

#include <chorus/chorus.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace chorus::examples {

struct GptConfig {
  std::int64_t vocab = 256;  // byte tokens
  std::int64_t seq = 64;     // tokens per sequence (the position table's size)
  std::int64_t layers = 2;   // transformer blocks
  std::int64_t d_model = 128;
  std::int64_t heads = 4;
};

// Token and position embeddings (the TokenAndPositionEmbedding of Keras's GPT examples): a layer
// that owns two Embedding layers, as the attributes token_emb and pos_emb (its checkpoint keys:
// "token_emb/embeddings", "pos_emb/embeddings"). x: int32 [B, seq] → [B, seq, dim].
class TokenAndPositionEmbedding : public layers::Layer {
 public:
  TokenAndPositionEmbedding(std::int64_t vocab, std::int64_t seq, std::int64_t dim, std::string name = "embedding")
      : layers::Layer(std::move(name)), seq_(seq) {
    token_ = track_layer(layers::Embedding(vocab, dim, initializers::random_uniform(), "token"), "token_emb");
    position_ = track_layer(layers::Embedding(seq, dim, initializers::random_uniform(), "position"), "pos_emb");
  }
  std::string class_name() const override { return "TokenAndPositionEmbedding"; }

 protected:
  Tensor call(const Tensor& x, bool training) override {
    std::vector<std::int32_t> positions(static_cast<std::size_t>(seq_));
    for (std::int64_t i = 0; i < seq_; ++i) positions[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
    const Tensor p = Tensor::from_vector<std::int32_t>(positions, {1, seq_}).to(x.device_name());
    return (*token_)(x, training) + (*position_)(p, training);  // [B, T, d] + [1, T, d]
  }

 private:
  std::int64_t seq_;
  layers::LayerPtr token_, position_;
};

// The GPT described at the top, named "gpt". Call inside strategy.scope() to mirror it.
inline std::unique_ptr<model::Functional> gpt(const GptConfig& c) {
  using layers::KerasTensor;
  auto tokens = layers::Input({c.seq}, DType::kInt32, "tokens");
  KerasTensor h = (*std::make_shared<TokenAndPositionEmbedding>(c.vocab, c.seq, c.d_model))(tokens);
  for (std::int64_t b = 0; b < c.layers; ++b) {
    const std::string block = "block" + std::to_string(b) + "_";
    KerasTensor a = (*layers::LayerNormalization(-1, 1e-3, true, true, block + "norm1"))(h);
    a = (*layers::MultiHeadAttention(
        {.num_heads = c.heads, .key_dim = c.d_model / c.heads, .use_causal_mask = true, .name = block + "attention"}))(
        a);
    h = (*layers::Add(block + "add1"))({h, a});
    KerasTensor m = (*layers::LayerNormalization(-1, 1e-3, true, true, block + "norm2"))(h);
    m = (*layers::Dense(4 * c.d_model, "gelu", true, initializers::glorot_uniform(), initializers::zeros(),
                        block + "mlp_up"))(m);
    m = (*layers::Dense(c.d_model, "", true, initializers::glorot_uniform(), initializers::zeros(),
                        block + "mlp_down"))(m);
    h = (*layers::Add(block + "add2"))({h, m});
  }
  h = (*layers::LayerNormalization(-1, 1e-3, true, true, "final_norm"))(h);
  auto logits_layer = layers::with_dtype_policy(
      layers::Dense(c.vocab, "", true, initializers::glorot_uniform(), initializers::zeros(), "logits"), "float32");
  KerasTensor logits = (*logits_layer)(h);
  return std::make_unique<model::Functional>(std::vector<KerasTensor>{tokens}, std::vector<KerasTensor>{logits}, "gpt");
}

// A text corpus: the regular files under `path` (sorted by name, so every run reads the same
// bytes), or the file itself, concatenated up to `max_bytes`. A missing path gives "" (the caller
// says what it needed).
inline std::string read_corpus(const std::string& path, std::int64_t max_bytes = 2 << 20) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(path, ec))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else if (std::filesystem::is_regular_file(path, ec)) {
    files.push_back(path);
  }
  std::string text;
  for (const auto& f : files) {
    const std::int64_t room = max_bytes - static_cast<std::int64_t>(text.size());
    if (room <= 0) break;
    std::ifstream in(f, std::ios::binary);
    std::string chunk(static_cast<std::size_t>(
                          std::min<std::int64_t>(static_cast<std::int64_t>(std::filesystem::file_size(f, ec)), room)),
                      '\0');
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
  }
  return text;
}

// Windows of seq + 1 bytes starting every `stride` bytes: elements (x, y), x = the first seq bytes
// and y = the next-byte targets (int32 [seq] each, values 0..255).
inline data::Dataset byte_windows(const std::string& text, std::int64_t seq, std::int64_t stride) {
  std::vector<std::int32_t> xs, ys;
  std::int64_t n = 0;
  for (std::int64_t i = 0; i + seq + 1 <= static_cast<std::int64_t>(text.size()); i += stride, ++n) {
    for (std::int64_t j = 0; j < seq; ++j) {
      xs.push_back(static_cast<unsigned char>(text[static_cast<std::size_t>(i + j)]));
      ys.push_back(static_cast<unsigned char>(text[static_cast<std::size_t>(i + j + 1)]));
    }
  }
  return data::Dataset::from_tensor_slices(
      {Tensor::from_vector<std::int32_t>(xs, {n, seq}), Tensor::from_vector<std::int32_t>(ys, {n, seq})});
}

}  // namespace chorus::examples
