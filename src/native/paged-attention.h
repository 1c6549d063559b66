// PagedAttention (domain `chorus`), the paged decoder's attention: the cache is a pool of blocks, each
// [kv_heads, block_size, head_dim] per layer, and each row reads and writes its own blocks through a
// block table, so that a row holds only the blocks its length needs.
//   inputs   qkv [rows, tokens, (heads + 2 * kv_heads) * dim]   queries, keys and values packed
//            key_cache, value_cache [blocks, kv_heads, block_size, dim]
//            seqlens_k int32 [rows]           each row's length after this run, minus one
//            block_table int32 [rows, max_blocks]   optional: row r's position j lives in block
//                                             block_table[r, j / block_size] at j % block_size.
//                                             Absent: row r's one block is block r (a cache of slots,
//                                             [rows, kv_heads, capacity, dim], as the slot decoder's)
//            cos_cache, sin_cache [positions, dim / 2]   optional: rotary embeddings (rotate-half,
//                                             Hugging Face's layout) applied to q and k at each token's position
//            qkv_bias [(heads + 2 * kv_heads) * dim]   optional: added to qkv (rounded as an Add would)
//            q_norm, k_norm [dim]             optional, together: an RMSNorm of each query and key head
//                                             (Qwen3's), after the bias and before the rotation
//   outputs  output [rows, tokens, heads * dim]
//            present_key, present_value       the caches after the new keys and values were written
//                                             (bind them to the caches' buffers to write in place)
//   attributes  num_heads, kv_num_heads (int), scale (float), sliding_window (int), softcap (float):
//               see AttentionAttributes (slot-attention.h); epsilon (float, default 1e-6): the norms'
// Token s of row r sits at position seqlens_k[r] + 1 - tokens + s and attends over the keys up to it
// (the last sliding_window of them, with a window; the blocks before stay in the table);
// query head h reads key head h / (num_heads / kv_num_heads). The bias, then the rotation, are rounded
// to the float type (a norm is taken in float32 and rounded once, as SimplifiedLayerNormalization's);
// scores, softmax and the weighted sum run in float32.
//
// On CUDA the new keys and values are written by one launch, then one block per (token row, key head,
// split of the row's positions) scores the group of query heads that share the key head against each
// key and value it reads once (an online softmax), and a last launch joins the splits when there are
// several. A decode step (one token a row) writes its new key and value in the block of the split
// that holds its position, with no launch before it, and takes the decode kernel where its heads are
// 16-byte vectors: its first keys and values read before the wait for the projection before it (a
// dependent launch), one softmax update per head a round of positions, and the splits joined by the
// one that finishes last. The splits are chosen from the launch's shape alone (enough blocks to fill the GPU), so
// the step can be captured in a CUDA graph: lengths and block tables are read on the device.
#pragma once

#include <cstddef>
#include <cstdint>

#include <vector>

#include "kernels.h"

namespace chorus {

struct PagedAttentionArgs {
  const void* qkv;
  const void* bias;  // null: none
  const void* cos;   // null: no rotary embeddings (then sin null too)
  const void* sin;
  int rotaryPositions;  // rows of cos and sin
  const void* qNorm;    // null: no norms (then kNorm null too)
  const void* kNorm;
  float epsilon;
  void* keyCache;
  void* valueCache;
  const int32_t* seqlens;
  const int32_t* blockTable;  // null: row r's one block is block r
  int maxBlocks;  // the block table's columns (1 without a table)
  int blockSize;
  int blocks;  // blocks in the caches
  void* output;
  int rows;
  int tokens;
  int heads;
  int kvHeads;
  int dim;
  float scale;
  int window;     // 0: none (see AttentionAttributes)
  float softcap;  // 0: none
  FloatType type;
};

// Host: writes the new keys and values, then the attention, on host memory.
void PagedAttentionHost(const PagedAttentionArgs& args);

#ifdef CHORUS_WITH_CUDA
// Device: how many splits a launch of `args` takes on a device of `multiprocessors`, and the float32
// workspace it then needs (0 with one split), zeroed once when it is allocated (the decode kernel's
// counters, which each launch leaves at zero).
int PagedAttentionSplits(const PagedAttentionArgs& args, int multiprocessors);
size_t PagedAttentionWorkspaceFloats(const PagedAttentionArgs& args, int splits);
// Device: the attention on device memory, on `stream`, in `splits` splits (workspace: as above).
void PagedAttentionDevice(const PagedAttentionArgs& args, int splits, float* workspace, void* stream);
// Whether PagedAttentionDevice takes a decode step of `args` in `splits` splits with its decode kernel
// (few rows, their positions split), rather than the general kernel.
bool PagedDecodeKernelTakes(const PagedAttentionArgs& args, int splits);

// An operator's workspace for PagedAttentionDevice: the splits a launch takes on the current device, and
// a zeroed workspace that holds them. It grows in a plain run (a captured run of the same shape, which
// follows one, finds it in place); smaller ones are kept until the operator goes, as graphs captured
// earlier still write there.
class PagedWorkspace {
 public:
  PagedWorkspace() = default;
  PagedWorkspace(const PagedWorkspace&) = delete;
  PagedWorkspace& operator=(const PagedWorkspace&) = delete;
  ~PagedWorkspace();
  int Splits(const PagedAttentionArgs& args);
  // PagedAttentionDevice(args, splits, ...) on `stream` (a cudaStream_t), its launch checked.
  void Attend(const PagedAttentionArgs& args, int splits, void* stream);

 private:
  int multiprocessors_ = 0;
  float* workspace_ = nullptr;
  size_t floats_ = 0;
  std::vector<float*> retired_;
};
#endif

}  // namespace chorus
