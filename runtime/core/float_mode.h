// runtime/core/float_mode.h — the floating-point mode of a computing thread: whether subnormal
// ("denormal") floats are flushed to zero.
//
// Why it exists: a diverging run (a loss in the hundreds after a too-large learning rate)
// fills softmax tails, GELU/SwiGLU derivatives, attention and LM-head gradients and the
// gradients AdamW reads with subnormals (below FLT_MIN = 1.18e-38): in configs/tiny.yaml at
// lr 10, 99% of the LM head's d_logits, a third of attention's dS and ~20% of the gradients.
// Cores that handle them in microcode (Intel documents an assist of the order of a hundred
// cycles per instruction that reads or produces one) then run sgemm on such operands many
// times slower, and a diverging job looks hung; AMD Zen 3 pays little (tessera bench diverged
// measures the machine it runs on). Flushed, those values are exact zeros and every
// instruction runs at full speed. Healthy training produces none (no sgemm operand or result,
// activation, gradient or AdamW moment of 100 steps of configs/tiny.yaml or llama-tiny.yaml
// held one), so its bits are those of IEEE arithmetic.
//
// The mode is two bits of a per-thread control register (x86-64: MXCSR.FTZ flushes results,
// MXCSR.DAZ reads subnormal inputs as zero; AArch64: FPCR.FZ does both) and is deterministic.
// No compiler flag is involved: the code is the same, only the register differs.
// Inheritance: on Linux a new thread starts with a copy of its creator's register, so setting
// the mode on the main thread before any thread exists gives it to every later thread (OpenMP
// pool, communicator progress threads); runtime/kernels/cpu/threads.h also sets it explicitly on
// every thread of the kernels' pool.
// Thread-safety: each function reads or writes the calling thread's register only.
#pragma once

namespace tessera {

// True when this CPU can flush both results and inputs: on x86-64 when MXCSR_MASK (from
// FXSAVE) reports DAZ, as every 64-bit x86 core does; always on AArch64; false elsewhere.
// Checked once, at run time.
bool CanFlushSubnormals();

// on = true: subnormal results become ±0 and subnormal inputs read as ±0 on the calling
// thread; on = false: IEEE gradual underflow (the power-on default). A no-op where
// CanFlushSubnormals() is false. Idempotent.
void SetFlushSubnormals(bool on);

// True when the calling thread currently flushes both subnormal results and inputs.
bool FlushesSubnormals();

}  // namespace tessera
