// The time steps of RNN, GRU and LSTM (delegates/gpu/ops/recurrent.py), float32 values stored as stype
// (see common.h); the recurrent state lives in float scratch buffers, so that fp16 storage rounds
// only what the op outputs.
//
// The input projection XW = X W^T of every time step is one GEMM before the first step: row
// t * xw_t + b * xw_b (the rows of X in its own layout), column d * G*H + g * H + j (direction d,
// gate g, hidden unit j). Each step launch then runs both directions: one work-item per
// (d, b, j) adds the biases and the recurrent product h_{t-1} R^T (summing k = 0 .. H-1 in order)
// and applies the gates. Launch s reads the state written by launch s - 1 (two buffers, in turn).
//
// Sequence lengths: a sequence of length L runs steps s < L, at time s (forward) or L-1-s
// (reverse: it starts at its own last step); at steps s >= L it keeps its state and writes the
// zeros of Y at time s, so that every element of Y is written once per direction.
//
// Activations: ACT_ARGS holds per (direction, function) slot k = d * functions + f a code (four
// bits of `acts` each, the order of recurrent.py ACTIVATIONS) and its alpha / beta.

#define ACT_ARGS const int acts, const float al0, const float al1, const float al2, const float al3, \
    const float al4, const float al5, const float be0, const float be1, const float be2, const float be3, \
    const float be4, const float be5
#define ACT(k, x) rnn_act((acts >> (4 * (k))) & 15, (x), rnn_pick((k), al0, al1, al2, al3, al4, al5), \
    rnn_pick((k), be0, be1, be2, be3, be4, be5))

// The geometry every step kernel takes: sizes, the step, whether direction 0 runs in reverse
// (direction 1, when there is one, always does), and the sequence lengths (has_lens = 0: all T).
#define STEP_ARGS const int T, const int B, const int H, const int D, const int s, const int reverse0, \
    __global const int* lens, const int has_lens

// Y element (t, d, b, j) is y[t * y_t + d * y_d + b * y_b + j] (layout 0 or 1); has_y = 0: no Y.
#define Y_ARGS __global stype* y, const int has_y, const int y_t, const int y_d, const int y_b
// Y[t, d, b, j] = v when Y is an output.
#define STORE_Y(v) if (has_y) STOREF(y, t * y_t + d * y_d + b * y_b + j, v)

inline float rnn_pick(const int k, const float v0, const float v1, const float v2, const float v3,
                      const float v4, const float v5) {
    return k == 0 ? v0 : k == 1 ? v1 : k == 2 ? v2 : k == 3 ? v3 : k == 4 ? v4 : v5;
}

inline float rnn_act(const int code, const float x, const float a, const float b) {
    switch (code) {
        case 0: return x > 0.0f ? x : 0.0f;                              // Relu
        case 1: return tanh(x);                                          // Tanh
        case 2: return 1.0f / (1.0f + exp(-x));                          // Sigmoid
        case 3: return a * x + b;                                        // Affine
        case 4: return x >= 0.0f ? x : a * x;                            // LeakyRelu
        case 5: return x > a ? x : 0.0f;                                 // ThresholdedRelu
        case 6: return a * tanh(b * x);                                  // ScaledTanh
        case 7: return fmin(fmax(a * x + b, 0.0f), 1.0f);                // HardSigmoid
        case 8: return x >= 0.0f ? x : a * expm1(x);                     // Elu
        case 9: return x / (1.0f + fabs(x));                             // Softsign
        // Softplus log(1 + e^x), written so that e^x never overflows
        default: return x > 0.0f ? x + log1p(exp(-x)) : log1p(exp(x));
    }
}

// x limited to [-c, c] when has_clip (a NaN stays NaN).
inline float rnn_clip(const float x, const int has_clip, const float c) {
    return !has_clip ? x : x < -c ? -c : x > c ? c : x;
}

inline int rnn_len(__global const int* lens, const int has_lens, const int b, const int T) {
    if (!has_lens) return T;
    const int L = lens[b];
    return L < 0 ? 0 : L > T ? T : L;  // out-of-range lengths never index past X or Y
}

// The pre-activation of gate row gj = g * H + j of direction d (GH = G * H rows per direction)
// for batch b at time t: the projection XW[xrow], the biases Wb + Rb, and the recurrent product
// h R[d, gj]^T, h being row h_off of a float state buffer.
inline float rnn_gate(__global const stype* xw, const int xrow, __global const stype* bias,
                      const int has_bias, __global const stype* R, __global const float* h, const int h_off,
                      const int D, const int H, const int GH, const int d, const int gj) {
    const int row = d * GH + gj;  // of W, R and the projection's columns
    float acc = LOADF(xw, xrow * D * GH + row);
    if (has_bias) acc += LOADF(bias, d * 2 * GH + gj) + LOADF(bias, d * 2 * GH + GH + gj);
    float dot = 0.0f;
    for (int k = 0; k < H; ++k) dot += h[h_off + k] * LOADF(R, row * H + k);
    return acc + dot;
}
// Gate gj of the kernel's own work-item, from the state `h` (the kernel defines GH).
#define GATE(gj, h) rnn_gate(xw, xrow, bias, has_bias, R, (h), h_off, D, H, GH, d, (gj))

// Where a step puts work-item i = (d * B + b) * H + j: its time t, and whether the sequence is
// still running (else t = s, the Y position it zeros).
#define STEP_BEGIN                                                                   \
    const int i = get_global_id(0);                                                  \
    if (i >= D * B * H) return;                                                      \
    const int j = i % H, b = (i / H) % B, d = i / (B * H);                           \
    const int L = rnn_len(lens, has_lens, b, T);                                     \
    const int live = s < L;                                                          \
    const int t = !live ? s : (d == 1 || reverse0) ? L - 1 - s : s;                  \
    const int xrow = t * xw_t + b * xw_b;                                            \
    const int h_off = (d * B + b) * H;

// The initial state (one of initial_h / initial_c, element (d, b, j) at d * sd + b * sb + j;
// has_init = 0: zeros) into a float state buffer [D, B, H].
__kernel void rnn_state_init(__global const stype* init, const int has_init, __global float* state,
                             const int D, const int B, const int H, const int sd, const int sb) {
    const int i = get_global_id(0);
    if (i >= D * B * H) return;
    const int j = i % H, b = (i / H) % B, d = i / (B * H);
    state[i] = has_init ? LOADF(init, d * sd + b * sb + j) : 0.0f;
}

// The final state into Y_h / Y_c (element (d, b, j) at d * sd + b * sb + j); a sequence of length
// 0 has no last step: zeros, as onnxruntime gives.
__kernel void rnn_state_final(__global const float* state, __global stype* out, const int T, const int D,
                              const int B, const int H, const int sd, const int sb,
                              __global const int* lens, const int has_lens) {
    const int i = get_global_id(0);
    if (i >= D * B * H) return;
    const int j = i % H, b = (i / H) % B, d = i / (B * H);
    STOREF(out, d * sd + b * sb + j, rnn_len(lens, has_lens, b, T) > 0 ? state[i] : 0.0f);
}

// RNN: h = f(clip(XW + Wb + Rb + h R^T)).
__kernel void rnn_step(STEP_ARGS, __global const stype* xw, const int xw_t, const int xw_b,
                       __global const stype* R, __global const stype* bias, const int has_bias,
                       const int has_clip, const float clip, ACT_ARGS,
                       __global const float* h_in, __global float* h_out, Y_ARGS) {
    STEP_BEGIN
    if (!live) {
        h_out[i] = h_in[i];
        STORE_Y(0.0f);
        return;
    }
    const int GH = H;
    const float h = ACT(d, rnn_clip(GATE(j, h_in), has_clip, clip));
    h_out[i] = h;
    STORE_Y(h);
}

// LSTM, gates i, o, f, c (rows g * H + j of W, R, B), peepholes i, o, f; functions f, g, h:
// i = f(clip(.. + Pi c)), f = f(clip(.. + Pf c)) or 1 - i (input_forget), c' = f c + i g(clip(..)),
// o = f(clip(.. + Po c')), h' = o h(c').
__kernel void lstm_step(STEP_ARGS, __global const stype* xw, const int xw_t, const int xw_b,
                        __global const stype* R, __global const stype* bias, const int has_bias,
                        __global const stype* P, const int has_p, const int input_forget,
                        const int has_clip, const float clip, ACT_ARGS,
                        __global const float* h_in, __global const float* c_in,
                        __global float* h_out, __global float* c_out, Y_ARGS) {
    STEP_BEGIN
    if (!live) {
        h_out[i] = h_in[i];
        c_out[i] = c_in[i];
        STORE_Y(0.0f);
        return;
    }
    const int GH = 4 * H;
    const float c = c_in[i];
    const float pi = has_p ? LOADF(P, d * 3 * H + j) : 0.0f;
    const float po = has_p ? LOADF(P, d * 3 * H + H + j) : 0.0f;
    const float pf = has_p ? LOADF(P, d * 3 * H + 2 * H + j) : 0.0f;
    const float gate_i = ACT(3 * d, rnn_clip(GATE(j, h_in) + pi * c, has_clip, clip));
    float gate_f;
    if (input_forget) {
        gate_f = 1.0f - gate_i;
    } else {
        gate_f = ACT(3 * d, rnn_clip(GATE(2 * H + j, h_in) + pf * c, has_clip, clip));
    }
    const float c_new = gate_f * c + gate_i * ACT(3 * d + 1, rnn_clip(GATE(3 * H + j, h_in), has_clip, clip));
    const float gate_o = ACT(3 * d, rnn_clip(GATE(H + j, h_in) + po * c_new, has_clip, clip));
    const float h = gate_o * ACT(3 * d + 2, c_new);
    c_out[i] = c_new;
    h_out[i] = h;
    STORE_Y(h);
}

// GRU with linear_before_reset, gates z, r, h: z = f(clip(..)), r = f(clip(..)),
// n = g(clip(XW_h + Wbh + r (h Rh^T + Rbh))), h' = (1 - z) n + z h.
__kernel void gru_step(STEP_ARGS, __global const stype* xw, const int xw_t, const int xw_b,
                       __global const stype* R, __global const stype* bias, const int has_bias,
                       const int has_clip, const float clip, ACT_ARGS,
                       __global const float* h_in, __global float* h_out, Y_ARGS) {
    STEP_BEGIN
    if (!live) {
        h_out[i] = h_in[i];
        STORE_Y(0.0f);
        return;
    }
    const int GH = 3 * H, row = d * GH + 2 * H + j;
    const float z = ACT(2 * d, rnn_clip(GATE(j, h_in), has_clip, clip));
    const float r = ACT(2 * d, rnn_clip(GATE(H + j, h_in), has_clip, clip));
    float inner = 0.0f;
    for (int k = 0; k < H; ++k) inner += h_in[h_off + k] * LOADF(R, row * H + k);
    float outer = LOADF(xw, xrow * D * GH + row);
    if (has_bias) {
        inner += LOADF(bias, d * 2 * GH + GH + 2 * H + j);
        outer += LOADF(bias, d * 2 * GH + 2 * H + j);
    }
    const float n = ACT(2 * d + 1, rnn_clip(outer + r * inner, has_clip, clip));
    const float h = (1.0f - z) * n + z * h_in[i];
    h_out[i] = h;
    STORE_Y(h);
}

// GRU without linear_before_reset, first half of a step: z and r h_{t-1} (which every unit's
// candidate reads in full) into the float buffers zs and rh [D, B, H].
__kernel void gru_gates(STEP_ARGS, __global const stype* xw, const int xw_t, const int xw_b,
                        __global const stype* R, __global const stype* bias, const int has_bias,
                        const int has_clip, const float clip, ACT_ARGS,
                        __global const float* h_in, __global float* zs, __global float* rh) {
    STEP_BEGIN
    if (!live) return;
    const int GH = 3 * H;
    zs[i] = ACT(2 * d, rnn_clip(GATE(j, h_in), has_clip, clip));
    rh[i] = ACT(2 * d, rnn_clip(GATE(H + j, h_in), has_clip, clip)) * h_in[i];
}

// Second half: n = g(clip(XW_h + Wbh + Rbh + (r h) Rh^T)), h' = (1 - z) n + z h.
__kernel void gru_state(STEP_ARGS, __global const stype* xw, const int xw_t, const int xw_b,
                        __global const stype* R, __global const stype* bias, const int has_bias,
                        const int has_clip, const float clip, ACT_ARGS,
                        __global const float* h_in, __global const float* zs, __global const float* rh,
                        __global float* h_out, Y_ARGS) {
    STEP_BEGIN
    if (!live) {
        h_out[i] = h_in[i];
        STORE_Y(0.0f);
        return;
    }
    const int GH = 3 * H;
    const float n = ACT(2 * d + 1, rnn_clip(GATE(2 * H + j, rh), has_clip, clip));
    const float z = zs[i];
    const float h = (1.0f - z) * n + z * h_in[i];
    h_out[i] = h;
    STORE_Y(h);
}
