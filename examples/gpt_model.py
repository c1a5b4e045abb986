"""The GPT of examples/gpt_model.h in tf_keras 2.21: the same layers, names and call order, so that
Keras's layer order and checkpoint keys equal chorus's (a chorus save_weights file loads with
assert_consumed()). Shared by tests/model/gpt_parity.py and bench/train/gpt_yardstick.py."""


def build_gpt(K, tf, seq, layers, d_model, heads, model_class=None, vocab=256):
    """tokens [B, seq] int32 → logits [B, seq, vocab]; model_class (default K.Model) makes the model."""

    class TokenAndPositionEmbedding(K.layers.Layer):
        def __init__(self, vocab, seq, dim, **kw):
            super().__init__(**kw)
            self.seq = seq
            self.token_emb = K.layers.Embedding(vocab, dim, name="token")
            self.pos_emb = K.layers.Embedding(seq, dim, name="position")

        def call(self, x):
            return self.token_emb(x) + self.pos_emb(tf.range(self.seq))  # [B, T, d] + [T, d]

    tokens = K.Input((seq,), dtype="int32", name="tokens")
    h = TokenAndPositionEmbedding(vocab, seq, d_model, name="embedding")(tokens)
    for b in range(layers):
        p = f"block{b}_"
        x = K.layers.LayerNormalization(epsilon=1e-3, name=p + "norm1")(h)
        x = K.layers.MultiHeadAttention(heads, d_model // heads, name=p + "attention")(x, x, use_causal_mask=True)
        h = K.layers.Add(name=p + "add1")([h, x])
        m = K.layers.LayerNormalization(epsilon=1e-3, name=p + "norm2")(h)
        m = K.layers.Dense(4 * d_model, activation="gelu", name=p + "mlp_up")(m)
        m = K.layers.Dense(d_model, name=p + "mlp_down")(m)
        h = K.layers.Add(name=p + "add2")([h, m])
    h = K.layers.LayerNormalization(epsilon=1e-3, name="final_norm")(h)
    logits = K.layers.Dense(vocab, name="logits", dtype="float32")(h)
    return (model_class or K.Model)(tokens, logits, name="gpt")
