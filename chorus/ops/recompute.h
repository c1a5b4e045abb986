// Activation recomputation — gradient checkpointing — as TensorFlow's tf.recompute_grad.
//
//   chorus::Variable w1 = ..., w2 = ...;
//   auto block = chorus::ops::recompute_grad([&](const chorus::Tensor& x) {
//     return ops::relu(ops::matmul(ops::relu(ops::matmul(x, w1.value())), w2.value()));
//   });
//   chorus::ops::GradientTape tape;
//   chorus::Tensor y = block(block_input);            // keeps block_input and y, not the inside
//   auto g = tape.gradient(loss_of(y), std::vector<chorus::Variable>{w1, w2});   // as without it
//
// recompute_grad(fn) returns a function computing the same values as fn. Called while a
// GradientTape records, it runs fn with the tapes recording none of fn's own ops — so none of the
// tensors fn's gradient would need are kept — and records a single op instead, whose inputs are
// what the tapes watch among what fn read (its watched arguments, the values of the trainable
// variables it read, watched tensors it captured; for a ZeRO stage-3 parameter its shard) and
// whose outputs are fn's results. When a backward pass reaches that op, it runs fn again on the
// same arguments under a fresh inner tape and differentiates the results, seeded with their
// gradients, with respect to those inputs. So:
//   - memory: a tape holds fn's arguments and results instead of every intermediate of fn; a
//     backward pass holds one recomputed fn's intermediates at a time (plus what the rest of the
//     model keeps). The price is a second forward of fn in the backward pass;
//   - variables: tape.gradient(loss, vars) returns the gradients of the variables fn read as if fn
//     had been recorded normally (TF's recompute_grad passes variables' gradients through too);
//   - bitwise: the gradients are those of recording fn normally, bit for bit, with deterministic
//     kernels (the same ops run in the same order on the same values). The one exception is
//     floating addition order: a tensor used by fn more than once and also outside fn receives
//     fn's share as one sum (a + b) + c instead of a + (b + c);
//   - random numbers: every draw from a Generator (ops/random.h: Generator, the global generator,
//     ops::dropout with a generator, the Dropout layer) made while fn runs in the forward is
//     logged, and the recomputation is served the same Philox states in the same order, so it
//     draws the same dropout mask — without moving the generators again. Stateless ops (explicit
//     seeds) are unaffected: they draw the same numbers anyway;
//   - ZeRO stage 3: layers called inside fn gather their sharded parameters in the forward and
//     again in the recomputation (each a collective: every replica's backward pass reaches the same
//     recomputations, as the model is the same on every replica); the shards' gradients are
//     reduce-scattered in the recomputation's backward pass, as without recomputation;
//   - tapes: nested tapes each record the op (an outer persistent tape can differentiate the
//     backward pass again: the recomputation's ops are recorded by the tapes that record the
//     backward pass); a tape created inside fn records fn's ops as usual. Outside any tape the
//     returned function is just fn.
//
// Contract for fn: deterministic in its arguments, the variables it reads and the random draws it
// makes; the same number of results with the same shapes every run; no layer built inside it (a
// layer built in its first run draws its initial weights only then: build or call the layers once
// before wrapping them); no assignment to variables it reads between the forward and the
// backward pass (the recomputation reads the variables' values then). Tensors fn captures instead
// of taking as arguments are fine (watched ones get their gradients); their values must not
// change in between either. Results that are not floating, or that fn returns unchanged from its
// arguments, pass through without the op.
//
// Errors: an empty fn, or an undefined argument → InvalidArgumentError (when called); the
// recomputation returning another number of results or other shapes, or drawing other random
// numbers than the forward (another generator, another size, more or fewer draws) → InternalError
// from tape.gradient, naming what differed. Whatever fn throws propagates (from the call, or from
// tape.gradient when the recomputation throws).
//
// Thread-safety: the returned function may be called from any thread (each replica's own tape
// records it); fn must be safe to call from those threads. It shares fn (by shared ownership).
#pragma once

#include <functional>
#include <vector>

#include <chorus/core/tensor.h>

namespace chorus::ops {

using RecomputeFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
using RecomputeFn1 = std::function<Tensor(const Tensor&)>;

// fn with activation recomputation (tf.recompute_grad(fn)).
RecomputeFn recompute_grad(RecomputeFn fn);
// The same for a function of one tensor to one tensor.
RecomputeFn1 recompute_grad(RecomputeFn1 fn);

}  // namespace chorus::ops
