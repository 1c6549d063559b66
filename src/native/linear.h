// Linear (domain `chorus`): the slot decoders' projections, bias and activation included.
//   inputs   x [..., in]
//            weight [out, in]          (nn.Linear's layout: each output's weights are one row)
//            bias [out]                optional
//            residual [..., in]        optional: with a norm, the residual stream x is added to
//            norm [in]                 optional: a pre-norm (RMSNorm) of x + residual before the product
//            post_norm [in]            optional, with a norm: a post-norm (RMSNorm) of x itself first
//            last_index [batch] int32  optional, with last: each row's position to take instead of its last
//   outputs  y [..., out] = activation(x @ weight^T + bias)
//            sum [..., in]             optional: x + residual, the residual stream's next value
//   attributes  activation (string): "" (none), "relu", "gelu" (erf), "gelu_tanh" (gelu_new, FastGelu),
//               "silu"
//               gated (int, default 0): 1 for a gated MLP's two projections in one (SwiGLU, GeGLU): weight
//               [2 * out, in] is the gate's rows then the up projection's (bias likewise), and
//               y [..., out] = activation(x @ gate^T + gate_bias) * (x @ up^T + up_bias), each product
//               rounded with its bias, the activation's result rounded, then their product rounded: what
//               the gate's Linear, the up projection's and a Mul give apart, in one kernel (or one GEMM
//               and one pass).
//               norm_epsilon, post_norm_epsilon (float, default 1e-6): the norms' epsilons.
//               softcap (float, default 0: none): y becomes softcap * tanh(y / softcap) after the bias
//               and activation, rounded after the division, the tanh and the product, as the three
//               operators transformers runs in the float type (Gemma 2's final logits). Not gated.
//               last (int, default 0): 1 to take x [batch, sequence, in] (and the residual) at each
//               row's last position alone, y [batch, 1, out] (a decoder's head after a prefill; no sum).
//               With last_index, row r's position last_index[r] instead (a prefill of rows right-padded
//               to one width: each row's own last token); one position (a decode step) is taken as it
//               is, the index unread. The host checks each index is inside the sequence; the device
//               reads them only in its gather kernel (the run may be a captured graph) and clamps them.
// The sum is taken in float32 and rounded to the float type once with its bias, as PyTorch's addmm
// rounds it; the activation is taken of that rounded value in float32 and rounded again.
// On CUDA a step of up to 8 rows (the decode steps of small batches) runs as one kernel of our own that
// reads each weight row once for all of them, bias and activation in its epilogue; more rows (prefills,
// large batches) run as a cuBLASLt GEMM with the bias (and a ReLU) in its epilogue (up to 256 rows, the
// fastest of cuBLASLt's candidates timed once per shape; CHORUS_LT_TUNE, linear.cu), then any other
// activation in one pass; where cuBLASLt does not load or has no algorithm for the product, as a GEMM on
// ONNX Runtime's own cuBLAS handle, then bias and activation in one pass (the GEMM's output rounded first).
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels.h"

#ifdef __CUDACC__
#define CHORUS_HOST_DEVICE __host__ __device__
#else
#define CHORUS_HOST_DEVICE
#endif

namespace chorus {

enum class Activation { kNone, kRelu, kGelu, kGeluTanh, kSilu };

// The activation of v, in float32 (one definition for the host and the device).
CHORUS_HOST_DEVICE inline float Activate(float v, Activation a) {
  switch (a) {
    case Activation::kRelu:
      return v > 0 ? v : 0;
    case Activation::kGelu:
      return 0.5f * v * (1 + erff(v * 0.70710678118654752f));
    case Activation::kGeluTanh:
      return 0.5f * v * (1 + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    case Activation::kSilu:
      return v / (1 + expf(-v));
    default:
      return v;
  }
}

// The activation an attribute value names; throws for any other.
Activation ActivationNamed(const std::string& name);

struct LinearArgs {
  const void* x;
  const void* weight;
  const void* bias;  // null: none
  void* y;
  int rows;
  int in;
  int out;
  Activation activation;
  FloatType type;
  bool gated = false;  // weight [2 * out, in]: y = activation(gate product) * up product
  // A pre-norm (norm given): x is the residual stream's new delta, and the product is taken of
  // RMSNorm(x + residual) * norm instead of x (residual null: of RMSNorm(x) * norm). sum, where given,
  // receives x + residual (rounded to the float type), the stream's next value.
  const void* residual = nullptr;
  const void* norm = nullptr;
  void* sum = nullptr;
  float epsilon = 0;
  // A post-norm (with a pre-norm): x is the raw output of the sublayer before, normed on its own first,
  // round(postNorm * x * rsqrt(mean(x^2) + postEpsilon)), then added to the residual (Gemma 2's
  // post-attention and post-feedforward norms, each followed by the next pre-norm).
  const void* postNorm = nullptr;
  float postEpsilon = 0;
  // Soft-capping of y (0: none): softcap * tanh(y / softcap), each step rounded to the float type.
  float softcap = 0;
};

// The plain product of rows `normed` (a pre-norm's pass wrote them from args' x) in args' place: args
// (LinearArgs or QuantLinearArgs) without their pre-norm.
template <class Args>
Args OfNormedRows(const Args& args, const void* normed) {
  Args plain = args;
  plain.x = normed;
  plain.norm = nullptr;
  plain.residual = nullptr;
  plain.sum = nullptr;
  return plain;
}
// LinearArgs': the post-norm goes with the pre-norm.
inline LinearArgs OfNormedRows(const LinearArgs& args, const void* normed) {
  LinearArgs plain = OfNormedRows<LinearArgs>(args, normed);
  plain.postNorm = nullptr;
  return plain;
}

// The pre-norm of a Linear (args.norm given) on its own: sum = x + residual (rounded to the float type;
// written where args.sum is given; x post-normed first where args.postNorm is given) and normed =
// round(norm * round(sum * rsqrt(mean(sum^2) + epsilon))), the RMSNorm transformers computes in half
// precision, [rows, in].
void PreNormHost(const LinearArgs& args, void* normed);

// Host: y of x, on host memory.
void LinearHost(const LinearArgs& args);
// Host: a gated Linear's y from `products` [rows, 2 * out] (the gate's and the up projection's
// products, each rounded with its bias already), as GatedDevice.
void GatedHost(const LinearArgs& args, const void* products);

#ifdef CHORUS_WITH_CUDA
// The most rows the device's own kernel takes; more go to cuBLAS. Each 16 bytes of x serves 4 weight
// rows, so 8 rows of x cost the kernel's loads through L1 twice the weights' bytes, not 8 times (the
// earlier kernel, one weight row a warp, took twice its 1-row time at 8 rows).
constexpr int kLinearKernelRows = 8;
// Device: y of x on `stream`, for at most kLinearKernelRows rows. On sm_90 the kernel goes out as a
// programmatic dependent launch (unless CHORUS_LINEAR_PDL=0 or SetLinearDependentLaunch(false)): it
// starts while the kernel before it finishes, pulling its weights into L2, and reads x only once that
// kernel's writes are visible.
// A pre-norm (args.norm) goes into the kernel: each block takes the sum of squares of its rows along
// with its products and scales its sums by the inverse root (the normed x not rounded on its way), and
// block 0 writes args.sum. It needs in a multiple of 16 bytes and 16-byte aligned x, residual and norm
// (LinearRowsFusesNorm), and at most kLinearNormRows rows.
void LinearRowsDevice(const LinearArgs& args, void* stream);
// The most rows the kernel takes with a pre-norm (more spill its registers: the separate pass then).
constexpr int kLinearNormRows = 4;
bool LinearRowsFusesNorm(const LinearArgs& args);
// Device: PreNormHost's pass on `stream` (for the products cuBLAS takes), one block a row.
void PreNormDevice(const LinearArgs& args, void* normed, void* stream);
void SetLinearDependentLaunch(bool on);
bool LinearDependentLaunch();
// The switch itself, for the other decode kernels that go out as dependent launches (QuantLinear's).
std::atomic<bool>& LinearDependentLaunchFlag();
// Device: rows[r] <- from's row r * positions + index[r] (index on the device, clamped into
// 0..positions - 1; null: positions - 1, each row's last), rows of rowBytes, for r in 0..count - 1, on
// `stream`.
void GatherRowsDevice(const void* from, void* rows, size_t rowBytes, int count, int64_t positions, const int32_t* index, void* stream);
// Device: y += bias, then the activation, in place (after a GEMM wrote y), on `stream`.
void BiasActivateDevice(const LinearArgs& args, void* stream);
// Device: a gated Linear's y from `products` [rows, 2 * out] (the gate's and the up projection's
// products, each rounded with its bias already), on `stream`.
void GatedDevice(const LinearArgs& args, const void* products, void* stream);
// Device: outputs first..first + count - 1 of x @ weight^T by cuBLAS on `handle` (a cublasHandle_t
// bound to the stream), without bias and activation, into `y`, whose rows are `ldy` elements apart.
// cuBLAS is ONNX Runtime's CUDA provider's, found among the loaded libraries.
void LinearGemmDevice(const LinearArgs& args, void* handle, int first, int count, void* y, int ldy);
// Device: outputs first..first + count - 1 of x @ weight^T by cuBLASLt, with the bias (withBias) and a
// ReLU in its epilogue (the sum and bias rounded once), into `y` (rows `ldy` elements apart), on
// `stream`, using up to workspaceBytes of `workspace`. Other activations are left to BiasActivateDevice.
// Returns false, running nothing, where cuBLASLt has no algorithm for the product (or did not load);
// with a null workspace (and workspaceBytes > 0) it only says whether it has one.
// The products of up to `rows` rows whose cuBLASLt algorithm is chosen by timing (CHORUS_LT_TUNE; 0:
// none), to compare in one process.
void SetLinearLtTune(int rows);
bool LinearLtDevice(const LinearArgs& args, int first, int count, void* y, int ldy, bool withBias, void* workspace, size_t workspaceBytes, void* stream);
#endif

}  // namespace chorus
