"""The canonical op set: every ONNX operator at its latest version, one line each.

Each line is ``Name(inputs) -> outputs | attributes @since``. An input or output ending in
``?`` is optional, in ``*`` variadic. An attribute is ``name: type``, ``name: type!``
(required) or ``name: type = default``. The facts come from the ONNX operator
specification; the importer rewrites older operator versions into these forms.
"""

ONNX_OPS = {
    "": """
Abs(X) -> Y  @13
Acos(input) -> output  @22
Acosh(input) -> output  @22
Add(A, B) -> C  @14
AffineGrid(theta, size) -> grid  | align_corners: int = 0  @20
And(A, B) -> C  @7
ArgMax(data) -> reduced  | axis: int = 0, keepdims: int = 1, select_last_index: int = 0  @13
ArgMin(data) -> reduced  | axis: int = 0, keepdims: int = 1, select_last_index: int = 0  @13
Asin(input) -> output  @22
Asinh(input) -> output  @22
Atan(input) -> output  @22
Atanh(input) -> output  @22
Attention(Q, K, V, attn_mask?, past_key?, past_value?, nonpad_kv_seqlen?) -> Y, present_key?, present_value?, qk_matmul_output?  | is_causal: int = 0, kv_num_heads: int, left_window_size: int = -1, q_num_heads: int, qk_matmul_output_mode: int = 0, right_window_size: int = -1, scale: float, softcap: float = 0.0, softmax_precision: int  @25
AveragePool(X) -> Y  | auto_pad: str = 'NOTSET', ceil_mode: int = 0, count_include_pad: int = 0, dilations: ints, kernel_shape: ints!, pads: ints, strides: ints  @22
BatchNormalization(X, scale, B, input_mean, input_var) -> Y, running_mean?, running_var?  | epsilon: float = 9.999999747378752e-06, momentum: float = 0.8999999761581421, training_mode: int = 0  @15
Bernoulli(input) -> output  | dtype: int, seed: float  @22
BitCast(input) -> output  | to: int!  @26
BitShift(X, Y) -> Z  | direction: str!  @28
BitwiseAnd(A, B) -> C  @18
BitwiseNot(X) -> Y  @18
BitwiseOr(A, B) -> C  @18
BitwiseXor(A, B) -> C  @18
BlackmanWindow(size) -> output  | output_datatype: int = 1, periodic: int = 1  @17
Cast(input) -> output  | round_mode: str = 'up', saturate: int = 1, to: int!  @28
CastLike(input, target_type) -> output  | round_mode: str = 'up', saturate: int = 1  @25
CausalConvWithState(input, weight, bias?, past_state?) -> output, present_state  | activation: str = 'none'  @27
Ceil(X) -> Y  @13
Celu(X) -> Y  | alpha: float = 1.0  @28
CenterCropPad(input_data, shape) -> output_data  | axes: ints  @18
Clip(input, min?, max?) -> output  @13
Col2Im(input, image_shape, block_shape) -> output  | dilations: ints, pads: ints, strides: ints  @18
Compress(input, condition) -> output  | axis: int  @28
Concat(inputs*) -> concat_result  | axis: int!  @13
ConcatFromSequence(input_sequence) -> concat_result  | axis: int!, new_axis: int = 0  @11
Constant() -> output  | sparse_value: sparse_tensor, value: tensor, value_float: float, value_floats: floats, value_int: int, value_ints: ints, value_string: str, value_strings: strs  @25
ConstantOfShape(input) -> output  | value: tensor  @25
Conv(X, W, B?) -> Y  | auto_pad: str = 'NOTSET', dilations: ints, group: int = 1, kernel_shape: ints, pads: ints, strides: ints  @22
ConvInteger(x, w, x_zero_point?, w_zero_point?) -> y  | auto_pad: str = 'NOTSET', dilations: ints, group: int = 1, kernel_shape: ints, pads: ints, strides: ints  @10
ConvTranspose(X, W, B?) -> Y  | auto_pad: str = 'NOTSET', dilations: ints, group: int = 1, kernel_shape: ints, output_padding: ints, output_shape: ints, pads: ints, strides: ints  @22
Cos(input) -> output  @22
Cosh(input) -> output  @22
CumProd(x, axis) -> y  | exclusive: int = 0, reverse: int = 0  @26
CumSum(x, axis) -> y  | exclusive: int = 0, reverse: int = 0  @14
DFT(input, dft_length?, axis?) -> output  | inverse: int = 0, onesided: int = 0  @20
DeformConv(X, W, offset, B?, mask?) -> Y  | dilations: ints, group: int = 1, kernel_shape: ints, offset_group: int = 1, pads: ints, strides: ints  @22
DepthToSpace(input) -> output  | blocksize: int!, mode: str = 'DCR'  @28
DequantizeLinear(x, x_scale, x_zero_point?) -> y  | axis: int = 1, block_size: int = 0, output_dtype: int = 0  @28
Det(X) -> Y  @22
Div(A, B) -> C  @14
Dropout(data, ratio?, training_mode?) -> output, mask?  | seed: int  @22
DynamicQuantizeLinear(x) -> y, y_scale, y_zero_point  @11
Einsum(Inputs*) -> Output  | equation: str!  @28
Elu(X) -> Y  | alpha: float = 1.0  @22
Equal(A, B) -> C  @19
Erf(input) -> output  @13
Exp(input) -> output  @13
Expand(input, shape) -> output  @13
EyeLike(input) -> output  | dtype: int, k: int = 0  @22
Flatten(input) -> output  | axis: int = 1  @25
Floor(X) -> Y  @13
GRU(X, W, R, B?, sequence_lens?, initial_h?) -> Y?, Y_h?  | activation_alpha: floats, activation_beta: floats, activations: strs, clip: float, direction: str = 'forward', hidden_size: int, layout: int = 0, linear_before_reset: int = 0  @22
Gather(data, indices) -> output  | axis: int = 0  @13
GatherElements(data, indices) -> output  | axis: int = 0  @13
GatherND(data, indices) -> output  | batch_dims: int = 0  @13
Gelu(X) -> Y  | approximate: str = 'none'  @20
Gemm(A, B, C?) -> Y  | alpha: float = 1.0, beta: float = 1.0, transA: int = 0, transB: int = 0  @13
GlobalAveragePool(X) -> Y  @22
GlobalLpPool(X) -> Y  | p: int = 2  @22
GlobalMaxPool(X) -> Y  @22
Greater(A, B) -> C  @13
GreaterOrEqual(A, B) -> C  @16
GridSample(X, grid) -> Y  | align_corners: int = 0, mode: str = 'linear', padding_mode: str = 'zeros'  @22
GroupNormalization(X, scale, bias) -> Y  | epsilon: float = 9.999999747378752e-06, num_groups: int!, stash_type: int = 1  @21
HammingWindow(size) -> output  | output_datatype: int = 1, periodic: int = 1  @17
HannWindow(size) -> output  | output_datatype: int = 1, periodic: int = 1  @17
HardSigmoid(X) -> Y  | alpha: float = 0.20000000298023224, beta: float = 0.5  @22
HardSwish(X) -> Y  @22
Hardmax(input) -> output  | axis: int = -1  @13
Identity(input) -> output  @25
If(cond) -> outputs*  | else_branch: graph!, then_branch: graph!  @25
ImageDecoder(encoded_stream) -> image  | pixel_format: str = 'RGB'  @20
InstanceNormalization(input, scale, B) -> output  | epsilon: float = 9.999999747378752e-06  @22
IsInf(X) -> Y  | detect_negative: int = 1, detect_positive: int = 1  @20
IsNaN(X) -> Y  @20
LRN(X) -> Y  | alpha: float = 9.999999747378752e-05, beta: float = 0.75, bias: float = 1.0, size: int!  @13
LSTM(X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?) -> Y?, Y_h?, Y_c?  | activation_alpha: floats, activation_beta: floats, activations: strs, clip: float, direction: str = 'forward', hidden_size: int, input_forget: int = 0, layout: int = 0  @22
LayerNormalization(X, Scale, B?) -> Y, Mean?, InvStdDev?  | axis: int = -1, epsilon: float = 9.999999747378752e-06, stash_type: int = 1  @17
LeakyRelu(X) -> Y  | alpha: float = 0.009999999776482582  @16
Less(A, B) -> C  @13
LessOrEqual(A, B) -> C  @16
LinearAttention(query, key, value, past_state?, decay?, beta?) -> output, present_state  | chunk_size: int = 64, kv_num_heads: int!, q_num_heads: int!, scale: float = 0.0, update_rule: str = 'gated_delta'  @27
Log(input) -> output  @13
LogSoftmax(input) -> output  | axis: int = -1  @13
Loop(M?, cond?, v_initial*) -> v_final_and_scan_outputs*  | body: graph!  @25
LpNormalization(input) -> output  | axis: int = -1, p: int = 2  @22
LpPool(X) -> Y  | auto_pad: str = 'NOTSET', ceil_mode: int = 0, dilations: ints, kernel_shape: ints!, p: int = 2, pads: ints, strides: ints  @22
MatMul(A, B) -> Y  @13
MatMulInteger(A, B, a_zero_point?, b_zero_point?) -> Y  @10
Max(data_0*) -> max  @13
MaxPool(X) -> Y, Indices?  | auto_pad: str = 'NOTSET', ceil_mode: int = 0, dilations: ints, kernel_shape: ints!, pads: ints, storage_order: int = 0, strides: ints  @22
MaxRoiPool(X, rois) -> Y  | pooled_shape: ints!, spatial_scale: float = 1.0  @22
MaxUnpool(X, I, output_shape?) -> output  | kernel_shape: ints!, pads: ints, strides: ints  @22
Mean(data_0*) -> mean  @13
MeanVarianceNormalization(X) -> Y  | axes: ints = [0, 2, 3]  @13
MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz) -> output  | output_datatype: int = 1  @17
Min(data_0*) -> min  @13
Mish(X) -> Y  @22
Mod(A, B) -> C  | fmod: int = 0  @28
Mul(A, B) -> C  @14
Multinomial(input) -> output  | dtype: int = 6, sample_size: int = 1, seed: float  @22
Neg(X) -> Y  @13
NegativeLogLikelihoodLoss(input, target, weight?) -> loss  | ignore_index: int, reduction: str = 'mean'  @22
NonMaxSuppression(boxes, scores, max_output_boxes_per_class?, iou_threshold?, score_threshold?) -> selected_indices  | center_point_box: int = 0  @11
NonZero(X) -> Y  @13
Not(X) -> Y  @1
OneHot(indices, depth, values) -> output  | axis: int = -1  @28
Optional(input?) -> output  | type: type  @28
OptionalGetElement(input) -> output  @28
OptionalHasElement(input?) -> output  @28
Or(A, B) -> C  @7
PRelu(X, slope) -> Y  @16
Pad(data, pads, constant_value?, axes?) -> output  | mode: str = 'constant'  @25
Pow(X, Y) -> Z  @15
QLinearConv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B?) -> y  | auto_pad: str = 'NOTSET', dilations: ints, group: int = 1, kernel_shape: ints, pads: ints, strides: ints  @10
QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point) -> y  @21
QuantizeLinear(x, y_scale, y_zero_point?) -> y  | axis: int = 1, block_size: int = 0, output_dtype: int = 0, precision: int = 0, saturate: int = 1  @28
RMSNormalization(X, scale) -> Y  | axis: int = -1, epsilon: float = 9.999999747378752e-06, stash_type: int = 1  @23
RNN(X, W, R, B?, sequence_lens?, initial_h?) -> Y?, Y_h?  | activation_alpha: floats, activation_beta: floats, activations: strs = ['Tanh', 'Tanh'], clip: float, direction: str = 'forward', hidden_size: int, layout: int = 0  @22
RandomNormal() -> output  | dtype: int = 1, mean: float = 0.0, scale: float = 1.0, seed: float, shape: ints!  @22
RandomNormalLike(input) -> output  | dtype: int, mean: float = 0.0, scale: float = 1.0, seed: float  @22
RandomUniform() -> output  | dtype: int = 1, high: float = 1.0, low: float = 0.0, seed: float, shape: ints!  @22
RandomUniformLike(input) -> output  | dtype: int, high: float = 1.0, low: float = 0.0, seed: float  @22
Range(start, limit, delta) -> output  | stash_type: int = 1  @27
Reciprocal(X) -> Y  @13
ReduceL1(data, axes?) -> reduced  | keepdims: int = 1, noop_with_empty_axes: int = 0  @18
ReduceL2(data, axes?) -> reduced  | keepdims: int = 1, noop_with_empty_axes: int = 0  @18
ReduceLogSum(data, axes?) -> reduced  | keepdims: int = 1, noop_with_empty_axes: int = 0  @28
ReduceLogSumExp(data, axes?) -> reduced  | keepdims: int = 1, noop_with_empty_axes: int = 0  @28
ReduceMax(data, axes?) -> reduced  | keepdims: int = 1, noop_with_empty_axes: int = 0  @20
ReduceMean(data, axes?) -> reduced  | keepdims: int = 1, noop_with_empty_axes: int = 0  @18
ReduceMin(data, axes?) -> reduced  | keepdims: int = 1, noop_with_empty_axes: int = 0  @20
ReduceProd(data, axes?) -> reduced  | keepdims: int = 1, noop_with_empty_axes: int = 0  @18
ReduceSum(data, axes?) -> reduced  | keepdims: int = 1, noop_with_empty_axes: int = 0  @13
ReduceSumSquare(data, axes?) -> reduced  | keepdims: int = 1, noop_with_empty_axes: int = 0  @18
RegexFullMatch(X) -> Y  | pattern: str  @20
Relu(X) -> Y  @14
Reshape(data, shape) -> reshaped  | allowzero: int = 0  @25
Resize(X, roi?, scales?, sizes?) -> Y  | antialias: int = 0, axes: ints, coordinate_transformation_mode: str = 'half_pixel', cubic_coeff_a: float = -0.75, exclude_outside: int = 0, extrapolation_value: float = 0.0, keep_aspect_ratio_policy: str = 'stretch', mode: str = 'nearest', nearest_mode: str = 'round_prefer_floor'  @19
ReverseSequence(input, sequence_lens) -> Y  | batch_axis: int = 1, time_axis: int = 0  @28
RoiAlign(X, rois, batch_indices) -> Y  | coordinate_transformation_mode: str = 'half_pixel', mode: str = 'avg', output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0, spatial_scale: float = 1.0  @22
RotaryEmbedding(X, cos_cache, sin_cache, position_ids?) -> Y  | interleaved: int = 0, num_heads: int, rotary_embedding_dim: int = 0  @23
Round(X) -> Y  @22
STFT(signal, frame_step, window?, frame_length?) -> output  | onesided: int = 1  @17
Scan(initial_state_and_scan_inputs*) -> final_state_and_scan_outputs*  | body: graph!, num_scan_inputs: int!, scan_input_axes: ints, scan_input_directions: ints, scan_output_axes: ints, scan_output_directions: ints  @25
Scatter(data, indices, updates) -> output  | axis: int = 0  @9
ScatterElements(data, indices, updates) -> output  | axis: int = 0, reduction: str = 'none'  @18
ScatterND(data, indices, updates) -> output  | reduction: str = 'none'  @18
Selu(X) -> Y  | alpha: float = 1.6732631921768188, gamma: float = 1.0507010221481323  @22
SequenceAt(input_sequence, position) -> tensor  @11
SequenceConstruct(inputs*) -> output_sequence  @11
SequenceEmpty() -> output  | dtype: int  @11
SequenceErase(input_sequence, position?) -> output_sequence  @11
SequenceInsert(input_sequence, tensor, position?) -> output_sequence  @11
SequenceLength(input_sequence) -> length  @11
SequenceMap(input_sequence, additional_inputs*) -> out_sequence*  | body: graph!  @17
Shape(data) -> shape  | end: int, start: int = 0  @25
Shrink(input) -> output  | bias: float = 0.0, lambd: float = 0.5  @9
Sigmoid(X) -> Y  @13
Sign(input) -> output  @13
Sin(input) -> output  @22
Sinh(input) -> output  @22
Size(data) -> size  @25
Slice(data, starts, ends, axes?, steps?) -> output  @13
Softmax(input) -> output  | axis: int = -1  @13
SoftmaxCrossEntropyLoss(scores, labels, weights?) -> output, log_prob?  | ignore_index: int, reduction: str = 'mean'  @13
Softplus(X) -> Y  @22
Softsign(input) -> output  @22
SpaceToDepth(input) -> output  | blocksize: int!, mode: str = 'DCR'  @28
Split(input, split?) -> outputs*  | axis: int = 0, num_outputs: int  @18
SplitToSequence(input, split?) -> output_sequence  | axis: int = 0, keepdims: int = 1  @24
Sqrt(X) -> Y  @13
Squeeze(data, axes?) -> squeezed  @25
StringConcat(X, Y) -> Z  @20
StringNormalizer(X) -> Y  | case_change_action: str = 'NONE', is_case_sensitive: int = 0, locale: str, stopwords: strs  @10
StringSplit(X) -> Y, Z  | delimiter: str, maxsplit: int  @20
Sub(A, B) -> C  @14
Sum(data_0*) -> sum  @13
SwiGLU(A, B) -> Y  | alpha: float = 1.0  @28
Swish(X) -> Y  | alpha: float = 1.0  @24
Tan(input) -> output  @22
Tanh(input) -> output  @13
TensorScatter(past_cache, update, write_indices?) -> present_cache  | axis: int = -2, mode: str = 'linear'  @24
TfIdfVectorizer(X) -> Y  | max_gram_length: int!, max_skip_count: int!, min_gram_length: int!, mode: str!, ngram_counts: ints!, ngram_indexes: ints!, pool_int64s: ints, pool_strings: strs, weights: floats  @9
ThresholdedRelu(X) -> Y  | alpha: float = 1.0  @22
Tile(input, repeats) -> output  @13
TopK(X, K) -> Values, Indices  | axis: int = -1, largest: int = 1, sorted: int = 1  @24
Transpose(data) -> transposed  | perm: ints  @25
Trilu(input, k?) -> output  | upper: int = 1  @14
Unique(X) -> Y, indices?, inverse_indices?, counts?  | axis: int, sorted: int = 1  @28
Unsqueeze(data, axes) -> expanded  @25
Upsample(X, scales) -> Y  | mode: str = 'nearest'  @9
Where(condition, X, Y) -> output  @16
Xor(A, B) -> C  @7
""",
    "ai.onnx.ml": """
ArrayFeatureExtractor(X, Y) -> Z  @1
Binarizer(X) -> Y  | threshold: float = 0.0  @1
CastMap(X) -> Y  | cast_to: str = 'TO_FLOAT', map_form: str = 'DENSE', max_map: int = 1  @1
CategoryMapper(X) -> Y  | cats_int64s: ints, cats_strings: strs, default_int64: int = -1, default_string: str = '_Unused'  @1
DictVectorizer(X) -> Y  | int64_vocabulary: ints, string_vocabulary: strs  @1
FeatureVectorizer(X*) -> Y  | inputdimensions: ints  @1
Imputer(X) -> Y  | imputed_value_floats: floats, imputed_value_int64s: ints, replaced_value_float: float = 0.0, replaced_value_int64: int = 0  @1
LabelEncoder(X) -> Y  | default_float: float = -0.0, default_int64: int = -1, default_string: str = '_Unused', default_tensor: tensor, keys_floats: floats, keys_int64s: ints, keys_strings: strs, keys_tensor: tensor, values_floats: floats, values_int64s: ints, values_strings: strs, values_tensor: tensor  @4
LinearClassifier(X) -> Y, Z  | classlabels_ints: ints, classlabels_strings: strs, coefficients: floats!, intercepts: floats, multi_class: int = 0, post_transform: str = 'NONE'  @1
LinearRegressor(X) -> Y  | coefficients: floats, intercepts: floats, post_transform: str = 'NONE', targets: int = 1  @1
Normalizer(X) -> Y  | norm: str = 'MAX'  @1
OneHotEncoder(X) -> Y  | cats_int64s: ints, cats_strings: strs, zeros: int = 1  @1
SVMClassifier(X) -> Y, Z  | classlabels_ints: ints, classlabels_strings: strs, coefficients: floats, kernel_params: floats, kernel_type: str = 'LINEAR', post_transform: str = 'NONE', prob_a: floats, prob_b: floats, rho: floats, support_vectors: floats, vectors_per_class: ints  @1
SVMRegressor(X) -> Y  | coefficients: floats, kernel_params: floats, kernel_type: str = 'LINEAR', n_supports: int = 0, one_class: int = 0, post_transform: str = 'NONE', rho: floats, support_vectors: floats  @1
Scaler(X) -> Y  | offset: floats, scale: floats  @1
TreeEnsemble(X) -> Y  | aggregate_function: int = 1, leaf_targetids: ints!, leaf_weights: tensor!, membership_values: tensor, n_targets: int, nodes_falseleafs: ints!, nodes_falsenodeids: ints!, nodes_featureids: ints!, nodes_hitrates: tensor, nodes_missing_value_tracks_true: ints, nodes_modes: tensor!, nodes_splits: tensor!, nodes_trueleafs: ints!, nodes_truenodeids: ints!, post_transform: int = 0, tree_roots: ints!  @5
TreeEnsembleClassifier(X) -> Y, Z  | base_values: floats, base_values_as_tensor: tensor, class_ids: ints, class_nodeids: ints, class_treeids: ints, class_weights: floats, class_weights_as_tensor: tensor, classlabels_int64s: ints, classlabels_strings: strs, nodes_falsenodeids: ints, nodes_featureids: ints, nodes_hitrates: floats, nodes_hitrates_as_tensor: tensor, nodes_missing_value_tracks_true: ints, nodes_modes: strs, nodes_nodeids: ints, nodes_treeids: ints, nodes_truenodeids: ints, nodes_values: floats, nodes_values_as_tensor: tensor, post_transform: str = 'NONE'  @3
TreeEnsembleRegressor(X) -> Y  | aggregate_function: str = 'SUM', base_values: floats, base_values_as_tensor: tensor, n_targets: int, nodes_falsenodeids: ints, nodes_featureids: ints, nodes_hitrates: floats, nodes_hitrates_as_tensor: tensor, nodes_missing_value_tracks_true: ints, nodes_modes: strs, nodes_nodeids: ints, nodes_treeids: ints, nodes_truenodeids: ints, nodes_values: floats, nodes_values_as_tensor: tensor, post_transform: str = 'NONE', target_ids: ints, target_nodeids: ints, target_treeids: ints, target_weights: floats, target_weights_as_tensor: tensor  @3
ZipMap(X) -> Z  | classlabels_int64s: ints, classlabels_strings: strs  @1
""",
    "ai.onnx.preview": """
FlexAttention(Q, K, V) -> Y  | prob_mod: graph, scale: float, score_mod: graph, softmax_precision: int  @1
""",
    "offload": """
StackSequence(input_sequence) -> output  | dtype: int = 1, shape: ints  @1
Delegate(inputs*) -> outputs*  | backend: str!, compile_specs: specs!, fallback: graph!, fp16_error: str, processed: bytes!  @1
""",
    "ai.onnx.preview.training": """
Adagrad(R, T, inputs*) -> outputs*  | decay_factor: float = 0.0, epsilon: float = 9.999999974752427e-07, norm_coefficient: float = 0.0  @1
Adam(R, T, inputs*) -> outputs*  | alpha: float = 0.8999999761581421, beta: float = 0.9990000128746033, epsilon: float = 9.999999974752427e-07, norm_coefficient: float = 0.0, norm_coefficient_post: float = 0.0  @1
Gradient(Inputs*) -> Outputs*  | xs: strs!, y: str!, zs: strs  @1
Momentum(R, T, inputs*) -> outputs*  | alpha: float!, beta: float!, mode: str!, norm_coefficient: float!  @1
""",
}
