"""The expected findings of benchmarks/third_party.py: why a layer meant to be correct fails a
check, (layer name, check) -> the reason (several are bugs upstream, with their issue), and the
false alarms layercheck is known to give still."""

from __future__ import annotations

from catalogue.third_party_adapters import (
    _MOES,
)

_FLOAT32_ONLY = ("it allocates its running row maxima with torch.full(..., -torch.finfo(q.dtype).max) in the default "
                 "dtype (float32), which overflows for float64 q: the layer cannot run in float64 (its gradients are "
                 "judged against float32 differences instead)")

# Why a layer meant to be correct fails a check: (layer name, check) -> the reason
FINDINGS: dict[tuple[str, str], str] = {
    ("transformers RecurrentGemmaRglru", "observations"): (
        "by design: the RG-LRU keeps its last hidden state in a plain attribute (self.recurrent_states, sized by "
        "the batch) and starts every call from it, a decoding cache the model resets (_setup_cache); a batch of "
        "another size after the first raises, and one of the same size continues the first's sequence"),
    ("speechbrain QLinear, hand-written backward", "needs_input_grad"): (
        "true: QuaternionLinearCustomBackward computes the four weight gradients only when ctx.needs_input_grad[1] "
        "(r_weight) is set, so with r_weight frozen i_weight, j_weight and k_weight get none and stop training"),
    ("speechbrain QLinear, hand-written backward", "noncontiguous"): (
        "true: the custom-backward path flattens its input with x.view(batch * time, features), which raises on "
        "a non-contiguous input (a transposed one): reshape would copy"),
    **{(f"speechbrain {name}", check): (
        "true: its recurrent layers keep dropout masks as plain tensor attributes (drop_mask_te, a bank of 16000 "
        "masks in drop_masks) made on the CPU, and QLinear's absent bias as a plain zero tensor: .to() moves none "
        "of them, so on another device the layer mixes devices") for name, check in (
        ("QLSTM", "registered_tensors"), ("QLSTM", "meta_device"), ("QLiGRU", "registered_tensors"))},
    **{(f"speechbrain {name}", "state_valid"): (
        "true: its running statistics are updated from the batch's statistics without detaching them, so after a "
        "training call they carry the call's autograd graph (QBatchNorm never detaches, so the chain grows call "
        "after call; CBatchNorm detaches at the start of the next training call) and copy.deepcopy of the "
        "layer fails") for name in ("QBatchNorm", "QLiGRU", "CBatchNorm")},
    **{(f"speechbrain {name}", "dtype[float64]"): (
        "true (minor, seen at --larger only): when a batch differs from the input_shape it was built for, "
        "_change_batch_size makes its bank of dropout masks again with torch.ones(..., device=x.device), in the "
        "default dtype: a float64 layer's drop_masks turn float32") for name in ("LiGRU", "SLiGRU", "QLiGRU")},
    ("torchkbnufft KbNufftAdjoint", "backward_runs"): (
        "true, seen at --larger only (the adapter's trajectory keeps its 12 k-space points while the samples grow "
        "to 96): the adjoint's forward does not check that its data has one sample per trajectory point and "
        "runs, and its hand-written backward returns a gradient of 12 samples, which autograd refuses"),
    ("speechbrain SincConv", "dtype[float64]"): (
        "true: its sinc filters' time axis n_ and Hamming window window_ are plain float32 tensors made in "
        "__init__, so a float64 layer multiplies float64 band edges with float32 tensors and raises"),
    **{(f"speechbrain {name}", "deterministic"): (
        "true: StatisticsPooling adds random noise (a Gaussian draw rescaled to between eps and 9 eps, 1e-5 to 9e-5) "
        "to the mean it returns in every call, predict included, so two predictions of one input differ")
       for name in ("StatisticsPooling", "Xvector")},
    ("pytorch-metric-learning AngularLoss", "registered_tensors"): (
        "true (minor): its angle alpha is a plain 0-d tensor attribute: .double() and state_dict() never see it (as "
        "the zoo's registered_tensors_plain_scalar; a 0-d CPU tensor mixes with any device)"),
    ("pytorch-metric-learning MarginLoss", "registered_tensors"): (
        "true: beta (not learned by default) is a plain CPU tensor that forward indexes with the labels "
        "(self.beta[labels[anchor_idx]]) before moving the result: labels on a GPU index a tensor on the CPU"),
    ("pytorch-metric-learning P2SGradLoss", "gradients[float64]"): (
        "by design: its forward projects the class weights back onto the unit sphere in every call "
        "(self.weight.data = renorm(...)), so finite differences see the gradient of what the projection keeps and "
        "autograd gives the gradient at the projected weights (the message says the layer writes into its weight "
        "in every call)"),
    ("speechbrain GumbelSoftmax", "deterministic"): (
        "by design: it draws Gumbel noise in every call, eval included (F.gumbel_softmax), so its predict is random"),
    ("pyro Sylvester", "meta_device"): (
        "a bug upstream: Sylvester.Q builds its first Householder factor with device=x.device and the later ones "
        "with torch.eye(input_dim), on the CPU: with count_transforms > 1 the layer fails on a GPU"),
    ("pyro BatchNorm", "forward_predict_agree"): (
        "true (minor): log_abs_det_jacobian's size follows the mode, (1, D) from the batch's variance in training, "
        "(D,) from the moving variance in eval (Pyro's own comment: eval is there for gradient tests)"),
    ("zuko CNF log_prob", "gradients[float64]"): (
        "by design: its adaptive ODE solver (rtol 1e-5) chooses its steps from the input, and the adaptive "
        "checkpoint adjoint differentiates the accepted steps with their sizes held constant, so the gradient is "
        "off the differences of the solve by 0.05-0.3% (as torchsde's adjoint below)"),
    ("zuko GF log_prob", "gradients[float32]"): (
        "true (float32's range, seen at --larger only): the Gaussianization transform's log-Jacobian is the log of "
        "autograd's derivative through erf, exp(-u^2) with u = (a x + b) / sqrt(2), which is 0 in float32 past "
        "|a x + b| of about 14 (in float64 past 38): on the tails' inputs of a batch of 48 (scaled by 4, up to 12.6) "
        "its float32 log-density is -inf where float64's is about -170 (the log of a mean of normal densities, "
        "taken in log space with logsumexp, would keep it)"),
    ("performer-pytorch SelfAttention", "gradients[float64]"): (
        "by design: its softmax kernel subtracts a detached maximum inside exp() and adds an eps beside it, which "
        "keeps the normalisation from cancelling the maximum, so the gradient leaves out the derivative through it: "
        "3e-4 relative at seeds 0-4 (accepted with a note), 1.2% at seed 5 with 6 random features (the message "
        "names the maximum and the tolerance that accepts it)"),
    **{(f"torch.ao {name}", "dtype[float64]"): (
        "true: fake quantisation's kernels (fused_moving_avg_obs_fake_quant) take float32 only, so the module "
        "raises on float64 inputs and weights") for name in ("qat Linear", "qat Conv2d", "qat ConvBn2d",
                                                            "prepare_qat(conv, relu)")},
    **{(f"torch.ao {name}", "observations"): (
        "by design: the observer is switched by FakeQuantize's own observer_enabled, not by eval(), so each "
        "predict moves the quantisation range to its batch's min and max and an observation's output depends on "
        "the rest of its batch; the QAT workflow switches observers off (torch.ao.quantization.disable_observer) "
        "before evaluating") for name in ("FakeQuantize", "prepare_qat(conv, relu)")},
    ("torch.ao prepare_qat(conv, relu)", "copy"): (
        "true: prepare_qat gives the modules a qconfig that holds a local function "
        "(_add_module_to_qconfig_obs_ctr's get_factory_kwargs_based_on_module_device), which pickle refuses: "
        "torch.save of the whole prepared model fails"),
    ("transformers pytorch_utils.Conv1D (GPT-2)", "noncontiguous"): (
        "true: forward flattens its input with x.view(-1, x.size(-1)), which raises on a (B, T, C) input stored "
        "channels-first (a Conv1d's (B, C, T) output transposed back), where reshape would work; GPT-2's own "
        "blocks hand it contiguous tensors, so it bites only reuse outside them"),
    **{(f"transformers {name}", "noncontiguous"): (
        "true: forward flattens its input with hidden_states.view(-1, hidden_dim), which raises on a (B, T, C) "
        "input stored channels-first, where reshape would work (as GPT-2's Conv1D)")
       for name in _MOES if not name.startswith("Granite")},
    ("memory-efficient-attention FlashAttention", "dtype[float64]"): _FLOAT32_ONLY,
    ("memory-efficient-attention FlashAttention causal", "dtype[float64]"): _FLOAT32_ONLY,
    ("memory-efficient-attention CosineSimFlashAttention", "dtype[float64]"): (
        "true: its row sums are made in the default dtype (torch.zeros((*q.shape[:-1], 1), device=device): float32) "
        "and accumulated in place from float64 block sums (row_sums.add_): a float64 layer divides its output by "
        "sums rounded to float32 silently (Note [silent downcasts])"),
    ("memory-efficient-attention CosineSimFlashAttention", "gradients[float64]"): (
        "a bug upstream: with more than one key bucket (buckets of 4 keys here, for 5 keys) its hand-written "
        "backward is wrong; torch.autograd.gradcheck agrees in float64 (with the default dtype set to float64, so "
        "that its row sums are not kept in float32); with one bucket it agrees"),
    **{(f"monai {name}", "backward_runs"): (
        "a bug upstream (Project-MONAI/MONAI#8845): norm_cross_attn is built even without cross-attention and never "
        "used, so its parameters get no gradient (DistributedDataParallel refuses that unless "
        "find_unused_parameters=True)") for name in ("TransformerBlock", "UNETR (whole)", "ViT (whole)")},
    ("vector-quantize-pytorch VectorQuantize, learnable codebook", "needs_input_grad"): (
        "by design, but a trap: it applies the straight-through estimator only when the input requires grad, so "
        "with the input frozen the codebook gets the output's gradient directly and with it not: freezing the "
        "encoder changes the codebook's gradient"),
    ("vector-quantize-pytorch LatentQuantize", "backward_runs"): (
        "a bug upstream: with optimize_values=True (the default) its values_per_latent parameters appear only "
        "inside the straight-through .detach() and the losses' detached copies, so no gradient reaches them, and "
        "its in-place update runs only when optimize_values is False"),
    ("pytorch_wavelets DWT1DForward, symmetric padding", "gradients[float64]"): (
        "AFB1D's hand-written backward disagrees with its forward for the symmetric and reflect padding modes (it "
        "agrees for zero and periodization); torch.autograd.gradcheck fails it too"),
    **{(f"snntorch Leaky in a loop{suffix}", check): why for suffix in ("", ", reset to zero",
                                                                        ", learned beta and threshold")
       for check, why in (
           ("dtype[float64]", "its spikes are (x > 0).float(): float32 whatever the layer's dtype"),
           ("state_valid", "it keeps the membrane potential in a buffer with its graph (for backpropagation through "
                           "time across calls, by design), so a trained model's copy.deepcopy raises until reset_mem"),
           ("copy", "surrogate.atan() returns a local closure, which pickle refuses: torch.save of the whole model "
                    "fails"))},
    **{(f"norse {name}", check): why for name in ("LIFBoxCell", "LIFCell", "LICell", "LIF", "LSNN", "LIFAdEx")
       for check, why in (
           ("registered_tensors", "its hyperparameters are 0-d tensors in a NamedTuple attribute (p): .to(), "
                                  ".double() and state_dict() never see them"),
           ("copy", "its parameters' NamedTuple class is made where pickle cannot find it: torch.save of the whole "
                    "model fails"))},
    ("reformer-pytorch LSHSelfAttention", "deterministic"): (
        "by design: it draws its random rotations for hashing on every call, in eval mode too"),
    **{(name, "needs_input_grad"): (
        "a trap of reversible layers: the blocks' parameters are not inputs of the hand-written Function, so when "
        "the input does not require grad its backward never runs and the parameters get no gradient (a reversible "
        "stack on raw data trains nothing)") for name in ("reformer-pytorch ReversibleSequence",
                                                         "revtorch ReversibleSequence")},
    ("revtorch ReversibleSequence", "backward_pure"): (
        "by design: its backward deletes what it saved (del ctx.y) to free memory, so a second backward over the "
        "same graph (retain_graph=True, a gradient penalty) raises"),
    ("memcnn AdditiveCoupling", "backward_pure"): (
        "by design: it allows one backward pass per graph unless built with num_bwd_passes=2 (the next layer), and "
        "says so when a second one is tried"),
    ("pytorch-tabnet TabNetNoEmbeddings", "backward_runs"): (
        "a bug upstream: it builds an initial_bn of its own and never uses it (its encoder has its own), so those "
        "parameters get no gradient (DistributedDataParallel refuses that unless find_unused_parameters=True)"),
    ("pytorch-tabnet TabNetNoEmbeddings", "registered_tensors"): (
        "a bug upstream: the encoder keeps group_attention_matrix as a plain tensor attribute, so .double() leaves it "
        "float32 (dtype[float64] fails for it) and .to(device) leaves it behind"),
    ("pytorch-tabnet TabNetNoEmbeddings", "dtype[float64]"): "its unregistered group_attention_matrix stays float32",
    ("pytorch-tabnet Sparsemax", "input_unchanged"): (
        "a bug upstream: SparsemaxFunction.forward subtracts the row maxima from its input in place "
        "(input -= max_val), changing the caller's tensor"),
    ("kornia HardNet", "gradients[float64]"): (
        "by design: it normalises each patch by its mean and standard deviation detached (its comment: the "
        "gradients through them are too noisy to learn from), so its gradient is the derivative with those held "
        "constant, 1-8% off the full one; the message says the detached statistic is the whole disagreement and "
        "how to accept it (--tolerance) or leave the check out"),
    # (LaplaceFilter, SharpenFilter and MedianFilter keep their kernels so too, and move them in every call with
    # kernel.to(x): registered_tensors leaves such constants out)
    ("monai SavitzkyGolayFilter", "registered_tensors"): (
        "true: its coeffs is a plain tensor attribute, which state_dict() never sees; its forward moves it to the "
        "input's device and dtype, but the layer calls .item() and cannot run on the meta device, where "
        "registered_tensors asks how a call reads it, so it is reported"),
    **{(f"monai {name}", "noncontiguous"): (
        "true: it reshapes its input with .view(), which raises on a channels-last tensor (.reshape() would not)")
       for name in ("LaplaceFilter", "SharpenFilter")},
    ("monai SavitzkyGolayFilter", "dtype[float64]"): (
        "true: its coefficients stay a float32 plain attribute, so a float64 input comes out float32"),
    ("monai VectorQuantizer", "dtype[float64]"): (
        "true: EMAQuantizer casts its input to float32 (inputs.float()) before the distances to its codebook, which "
        "a float64 layer keeps in float64: the matrix product raises"),
    ("kornia SpatialSoftArgmax2d", "registered_tensors"): (
        "its temperature is a plain 0-d tensor attribute: .double() and state_dict() never see it (as the zoo's "
        "registered_tensors_plain_scalar)"),
    ("lucidrains nystrom-attention Nystromformer", "observations"): (
        "by design, but it mixes the batch: its Moore-Penrose iteration starts from the largest row and column sums "
        "over the whole batch, so each observation's output depends on the others (by about 1e-3 here)"),
    ("torchsde sdeint_adjoint euler, fixed noise", "gradients[float64]"): (
        "by design: the adjoint SDE, solved backwards with the same step, approximates the gradient of the Euler "
        "solve only up to discretisation error (its distance to sdeint's gradient shrinks with dt: 5e-3 at dt=1/8, "
        "2e-4 at dt=1/512); torch.autograd.gradcheck fails it too, and passes sdeint and reversible_heun's adjoint"),
    **{("roma special_procrustes, regularization", check): (
        "by design, and documented: _ProcrustesRegularization.backward adds regularization * (M - R) to M's gradient "
        "whatever the output's gradient ('cannot be expressed as the derivative of any function', its docstring "
        "says), so the gradient is not the forward's derivative (torch.autograd.gradcheck fails it, and passes it "
        "with regularization=0) and backward is affine in the output gradient, not linear (backward(0) = r(M - R))")
       for check in ("gradients[float64]", "grad_output")},
    **{(f"torch_struct {name}", "input_unchanged"): (
        "by design, but a side effect on the caller: _Struct._get_dimension calls requires_grad_(True) on the caller's "
        "log-potentials (so that marginals can be taken with torch.autograd.grad), under torch.no_grad too, so after "
        "the call the caller's tensor requires grad and its in-place writes raise")
       for name in ("LinearChainCRF", "SemiMarkovCRF", "TreeCRF", "LinearChain, SparseMaxSemiring",
                    "LinearChain, CheckpointSemiring(LogSemiring)")},
    ("torch_struct DependencyCRF", "predict_runs"): (
        "a bug upstream: deptree's convert() copies the log-potentials into a new tensor (root arcs moved off the "
        "diagonal), which is a leaf when the caller's tensor does not require grad; _get_dimension calls "
        "requires_grad_(True) on it and _check_potentials then fills slices of a view of it in place, which autograd "
        "refuses: any input that does not require grad raises, under torch.no_grad too (only inference_mode runs)"),
    ("torch_struct LinearChain, SparseMaxSemiring", "gradients[float64]"): (
        "a bug upstream: _SimplexProject.forward returns <x, w*> - ||w*||_2 but its backward returns w*, the gradient "
        "of <x, w*> - 1/2 ||w*||_2^2; torch.autograd.gradcheck fails it too, and passes it once the forward returns "
        "the half squared norm"),
    ("torch_struct LinearChain, CheckpointSemiring(LogSemiring)", "copy"): (
        "CheckpointSemiring(cls) returns a class defined inside the function, which pickle cannot find: torch.save "
        "of a model holding the structure fails (with LogSemiring itself it works)"),
    ("pykan KAN([4,3,2])", "registered_tensors"): (
        "a bug upstream: input_id (the inputs a pruned model keeps) is a plain tensor attribute, not a buffer: "
        "state_dict() leaves it out, so a pruned model loaded into a fresh one computes with the wrong inputs, and "
        ".to(device) leaves it behind"),
    ("pykan KAN([4,3,2])", "copy"): (
        "Symbolic_KANLayer keeps its symbolic functions as lambdas (symbolic_fun.*.funs), which pickle refuses: "
        "torch.save of the whole model fails"),
    **{(f"kan_gpt {name}", "noncontiguous"): (
        "true: the efficient KAN's forward (CausalSelfAttention's c_attn is one) flattens its (B, T, C) input with "
        "x.view(-1, T), its T being the last dimension, which raises on an input stored channels-first (a Conv1d's "
        "(B, C, T) output transposed back), where reshape would work; its GPT hands it contiguous tensors")
       for name in ("efficient KAN (as in its GPT)", "CausalSelfAttention (efficient KAN)")},
    **{(f"fft_conv_pytorch {name}", "dtype[float64]"): (
        "it computes in float32 whatever the dtype: fft_conv transforms signal.float() and kernel.float(), and its "
        "complex multiplication writes into a complex64 buffer, so float64 inputs and weights give a float32 output "
        "(FFTConv1d's is off F.conv1d's float64 result by about 2e-6)")
       for name in ("FFTConv1d", "FFTConv2d", "FFTConv2d, stride 2, dilation 2, groups 2")},
    **{(f"ultralytics {name}", "forward_predict_agree"): (
        "by design: its Classify head returns (softmax, logits) in eval mode, the logits alone in training mode (its "
        "export flag makes eval return the softmax alone)") for name in ("Classify", "YOLOv8n-cls (whole, 4 classes)")},
    ("ultralytics YOLOv8n (whole detector, 4 classes)", "forward_predict_agree"): (
        "by design: in training mode its Detect head returns the raw maps of its three levels (the loss decodes "
        "them), in eval mode the decoded boxes and class scores beside those maps"),
    **{(f"open_clip {name}", check): (
        "a bug upstream: with scaled_cosine its Attention calls torch.bmm on 4-d queries and keys (batch, heads, "
        "tokens, head size), which bmm refuses: it raises on every input ('batch1 must be a 3D tensor'), and so does "
        "CustomResidualAttentionBlock with scale_cosine_attn")
       for name in ("Attention, scaled cosine, head scales, inner norm",
                    "CustomResidualAttentionBlock (NormFormer scalings)")
       for check in ("predict_runs", "forward_runs")},
    **{(f"open_clip {name}", "dtype[float64]"): (
        "by design: LayerNormFp32 normalises x.to(torch.float32) with its weight, which .double() makes float64: "
        "F.layer_norm refuses the mix ('mixed dtype (CPU)'); it is meant for float16 and bfloat16 training (the "
        "q/k norm of its Attention is one)")
       for name in ("LayerNormFp32", "Attention, q/k norm")},
    **{(f"lightly {name}", "copy"): (
        "true: its last layer uses the legacy torch.nn.utils.weight_norm, whose weight is a computed tensor "
        "attribute that copy.deepcopy refuses (EMA teachers, AveragedModel); torch.nn.utils.parametrizations."
        "weight_norm copies") for name in ("DINOProjectionHead", "DINOProjectionHead, last layer frozen",
                                          "DINOv2ProjectionHead")},
    **{(f"diffsort DiffSortNet ({network}, {distribution})", check): why
       for network, distribution in (("odd_even", "cauchy"), ("odd_even", "gaussian"), ("bitonic", "logistic_phi"),
                                     ("bitonic", "optimal"))
       for check, why in (
           ("registered_tensors", "a bug upstream: it keeps its sorting network's matrices in a plain list "
                                  "(self.sorting_network), so .to(device) leaves them behind (it takes device= in "
                                  "its constructor instead) and state_dict() never sees them"),
           ("meta_device", "true: the same plain list stays on the CPU when the layer moves, and its forward asserts "
                           "that the network and the vectors share a device"))},
    ("lightly NNMemoryBankModule", "backward_runs"): (
        "by design: it returns the nearest neighbours of its input in its memory bank (a buffer), which carry no "
        "gradient; NNCLR uses them as stop-gradient targets"),
    ("transformers PhimoeSparseMoeBlock (sparse mixer)", "gradients[float64]"): (
        "by design: PhiMoE routes with SparseMixer, whose PhimoeMultiplier backward is a gradient estimator "
        "(Heun's third-order method: the router's gradient scaled by 1/3 where the sampled expert is not the "
        "top one and a coin says so), not the derivative of its forward; at seed 2 the router weight's analytic "
        "gradient is 3x the differences'"),
    ("diffusers ResnetBlock2D, FIR downsampling", "copy"): (
        "a bug upstream: with down=True and kernel='fir' it keeps a lambda (self.downsample = lambda x: "
        "downsample_2d(x, kernel=fir_kernel)), which pickle refuses: torch.save of the whole model fails (its other "
        "kernels are modules or functools.partial)"),
    ("diffusers Attention, VAE's (group norm, residual)", "noncontiguous"): (
        "a bug upstream: AttnProcessor2_0 flattens a 4-d input with hidden_states.view(batch_size, channel, "
        "height * width), which a strided view cannot give (reshape would work); the VAE hands it contiguous tensors"),
    ("diffusers Timesteps (sinusoidal)", "dtype[float64]"): (
        "by design: get_timestep_embedding computes the embedding in float32 whatever the dtype "
        "(timesteps[:, None].float() times a float32 arange), and the U-Nets cast it to their own dtype after"),
    **{(f"neuraloperator {name}", "dtype[float64]"): (
        "true: its spectral weights are complex64 Parameters (tltorch's factorised tensors' factors too), which "
        ".double() leaves complex64 (torch casts floating tensors only), and its einsum does not promote: after "
        ".double() it raises 'expected scalar type ComplexDouble but found ComplexFloat' (TFNO: 'both inputs should "
        "have same dtype'); neuraloperator tests float32 only. Its gradients are judged in float64 all the same "
        "(Note [complex weights in float64])")
       for name in ("SpectralConv dense 2d", "SpectralConv dense 1d", "SpectralConv Tucker 2d", "SpectralConv CP 2d",
                    "SpectralConv TT 2d", "FNOBlocks", "FNOBlocks, instance norm", "FNOBlocks, channel MLP",
                    "FNO 2d", "TFNO 2d (Tucker)")},
    **{(f"neuraloperator FNOBlocks{name}", "noncontiguous"): (
        "a bug upstream: its default linear skip (Flattened1dConv) calls x.view(*size[:2], -1) on the block's "
        "input, which a strided view cannot give (reshape would work); FNO hands it its lifting layer's contiguous "
        "output")
       for name in ("", ", instance norm", ", channel MLP")},
    ("torch-harmonics SpectralConvS2", "dtype[float64]"): (
        "true: its weight is a complex64 Parameter, which model.double() leaves complex64 (torch casts floating "
        "tensors only), and its einsum does not promote: after .double() it raises 'expected scalar type "
        "ComplexDouble but found ComplexFloat'"),
    ("torch-harmonics NeighborhoodAttentionS2", "dtype[float64]"): (
        "true: its attention is a custom operator whose CPU kernel takes float32 only; after .double() it raises "
        "'expected scalar type Float but found Double'"),
    ("torch-harmonics NeighborhoodAttentionS2", "copy"): (
        "a bug upstream: it keeps the custom operator's handle (a CustomOpDef) as an attribute, which "
        "copy.deepcopy refuses: EMA and AveragedModel cannot copy a model holding it"),
    ("rotary-embedding-torch RotaryEmbedding xpos", "copy"): (
        "a bug upstream: with use_xpos it stores apply_rotary_emb as a staticmethod object in an attribute, which "
        "copy.deepcopy and pickle refuse (without xpos it does not)"),
    **{(f"colt5-attention {name}", "copy"): (
        "a bug upstream: its Attend keeps configs of a namedtuple made as namedtuple('EfficientAttentionConfig', "
        "...) but bound to the name Config, where pickle cannot find it: torch.save of the whole model fails")
       for name in ("ConditionalRoutedAttention", "ConditionalRoutedImageAttention")},
    ("transformers LlamaRotaryEmbedding (dynamic NTK scaling)", "observations"): (
        "true, by design upstream: dynamic NTK scaling recomputes the frequencies from the largest position id in "
        "the whole batch (torch.max(position_ids) + 1 past max_position_embeddings), so a sequence's table depends "
        "on the other sequences batched with it"),
    ("transformers LlamaRotaryEmbedding (dynamic NTK scaling)", "dtype[float64]"): (
        "true (minor): the recomputed inv_freq buffer is made in float32 whatever the layer's dtype (the output "
        "is cast to the hidden states' dtype)"),
    **{(f"peft LoraConfig r=2, use_dora=True on {base}", "gradients[float64]"): (
        "by design: DoRA detaches the weight's column norm (peft's weight_norm.detach(), as the DoRA paper's section "
        "4.3 prescribes to save memory), so the gradients of lora_A and lora_B are the derivative with the norm held "
        "constant, 7-66% off the full one; the message says the detached statistic is the whole disagreement and to "
        "leave the check out for such a layer") for base in ("an MLP", "a CNN")},
    ("peft C3AConfig block_size=4 on an MLP", "gradients[float64]"): (
        "a bug upstream: BlockCircularConvolution.backward's gradient of x (fft of grad_output's fft times ifft(w)) is "
        "not the transpose of its forward; its gradient of w is right (the first layer's kernel is wrong only through "
        "the second layer's input gradient). torch.autograd.gradcheck fails it too, and passes the same forward left "
        "to autograd"),
    ("peft ShiraConfig r=2 on an MLP", "registered_tensors"): (
        "true: the sparse indices are plain tensors in a dict attribute (shira_indices['default']), not buffers: "
        ".to(device) leaves them behind and state_dict() does not save them (peft regenerates them from a seed when "
        "it loads)"),
    **{(f"torchao FakeQuantizedLinear {name}", "dtype[float64]"): (
        "true: its fake quantiser asserts a float32, float16 or bfloat16 input ('Unsupported input dtype: "
        "torch.float64'): the layer cannot run in float64 (its gradients are judged against float32 differences)")
       for name in ("int4 weight, group 4", "int8 per-token asymmetric activation, int4 weight",
                    "int8 per-channel weight")},
    ("segmentation_models_pytorch FPN (resnet18)", "observations"): (
        "true at these sizes: its segmentation blocks' GroupNorm(32, 32) sees one value per group at the 1x1 deepest "
        "level, which PyTorch refuses for a batch of one, in eval mode too ('Expected more than 1 value per channel "
        "when training'): one 32x32 image cannot be predicted alone (a batch of two, or 64x64, can)"),
    # (SimpleViT and its variants keep their sine-cosine position embedding as a plain tensor too, moved to the
    # input's device and dtype in every call: registered_tensors leaves such constants out)
    ("vit-pytorch jumbo_vit.JumboViT", "backward_runs"): (
        "true: the last layer's feedforward on the patch tokens runs but its result is never used (only the jumbo "
        "class tokens reach the head), so its parameters get no gradient (DistributedDataParallel refuses that "
        "unless find_unused_parameters=True)"),
    ("vit-pytorch jet_vit.JetViT", "backward_runs"): (
        "by design: RandomLayerSelector calls one of its attention options per call (random.choice), so the options "
        "not chosen get no gradient in that step"),
    ("vit-pytorch simple_vit_with_value_residual.SimpleViT", "copy"): (
        "its Attention keeps a lambda (to_residual_mix), which pickle refuses: torch.save of the whole model fails"),
    # rational_activations: every PyTorch version flattens its input with x.view(-1)
    **{(f"rational Rational version {version}", "noncontiguous"): (
        "true: every PyTorch version of the rational function flattens its input with x.view(-1), which raises on "
        "a non-contiguous input (a transposed or strided activation); .reshape(-1) would not")
       for version in "ABCD"},
    ("rational Rational version A", "meta_device"): (
        "a bug upstream: version A builds its denominator's coefficients with torch.tensor([1.]) and torch.zeros(...) "
        "on the CPU, so with the layer on a GPU (cuda=False, the PyTorch path) it raises a device mismatch"),
    ("rational Rational version D", "meta_device"): (
        "a bug upstream: version D's training noise is torch.FloatTensor(n).uniform_(...), made on the CPU, so its "
        "training forward on a GPU raises a device mismatch"),
    ("qpth OptNet QP (shared Q, G, h)", "gradients[float64]"): (
        "a bug upstream (qpth 0.0.18, qp.py): where Q, p, G, h, A or b is shared by the batch (expanded in forward), "
        "backward returns the mean of its per-observation gradients (dQs.mean(0)) instead of their sum: 1/batch of "
        "the gradient of what forward computes, as the message says (0.25 = 1/4, the batch size); batched "
        "tensors' gradients are right (mutants.py checks QPFunction so)"),
    **{(f"torchdeq DEQ {name}", "copy"): (
        "true: get_deq() keeps its gradient functions in a list attribute (produce_grad) of closures made in "
        "torchdeq.grad.backward_factory, which pickle cannot save: torch.save of a model holding a DEQ fails")
       for name in ("implicit (IFT) gradient, Anderson", "implicit (IFT) gradient, fixed-point iteration",
                    "phantom gradient (its default)")},
    ("torchdeq DEQ phantom gradient (its default)", "forward_predict_agree"): (
        "by design: in training the DEQ returns one more application of the function to the solver's fixed point "
        "(the step its phantom gradient is taken through), in eval the fixed point itself; at its default tolerance "
        "(1e-3) the two differ by about 1e-4. Its gradient, the phantom one, passes: the solver runs under no_grad "
        "and the trace holds what it detaches (a note says so)"),
    ("torchcde NeuralCDE cubic spline, RK4, adjoint", "gradients[float64]"): (
        "by design: with adjoint=True the gradient is the continuous adjoint equation integrated backwards with "
        "RK4, not the derivative of the discretised forward, so the two differ by the solver's discretisation "
        "error (1e-4 to 3e-3 relative at step 0.25); without the adjoint it passes"),
    **{(f"pypose {name}", "gradients[float64]"): (
        "by design: PyPose's gradient with respect to a group element (a unit quaternion) is a Lie algebra one "
        "(left tangent space: three numbers and a zero for the quaternion's fourth), not the derivative in the "
        "four coordinates, so a group element alone as an input or output disagrees with finite differences; "
        "chained back to ordinary tensors (the SO3 Act and chain layers) every gradient passes")
       for name in ("so3 Exp", "SO3 Log")},
    ("pypose Sim3 chain", "gradients[float64]"): (
        "true (an approximation): sim3_Jl and sim3_Jl_inv, the Jacobians its sim(3) Exp and Log backward use, are "
        "Taylor series in ad(xi) cut after the sixth and fourth powers, so at standard-normal algebra vectors the "
        "gradient is 0.5-6% off; exact for small ones (mutants.py checks it at values in [-0.05, 0.05], where it "
        "passes); SO3, SE3 and RxSO3 use closed forms and pass"),
    ("geomloss SamplesLoss sinkhorn", "gradients[float64]"): (
        "by design: its Sinkhorn loop runs the epsilon-scaling iterations under no_grad and differentiates the last "
        "extrapolation only (the envelope theorem), which is the gradient at convergence; at blur 0.5 and its "
        "default scaling the loop stops short of it (0.3 relative here). The message says the values it detaches "
        "are the whole disagreement"),
    ("geomloss SamplesLoss sinkhorn", "observations"): (
        "true, by design: the tensorised backend starts its epsilon-scaling from the diameter of all the batch's "
        "points (x.view(-1, D)), so each pair of clouds' loss depends on the others in the batch"),
    ("geomloss SamplesLoss sinkhorn", "noncontiguous"): (
        "true: it flattens the batch's points with x.view(-1, D), which raises on a non-contiguous cloud"),
    ("lucidrains st-moe MoE", "deterministic"): (
        "by design: its top-n gating routes a token to its second expert with probability min(1, gate / threshold), "
        "drawn with uniform_ in eval too (threshold_eval), so predict is random (at seed 0 a draw changes a route)"),
    ("lucidrains mixture-of-experts MoE", "deterministic"): (
        "by design: its default second_policy_eval='random' routes each token to its second expert at random in "
        "eval too, so predict is random"),
    **{(f"sru SRU{name}", "dtype[float64]"): (
        "true: its CPU kernel (torch.ops.sru_cpu.cpu_forward, TorchScript) takes float32 only ('expected scalar type "
        "Float but found Double'): the layer cannot run in float64 (its gradients are judged against float32 "
        "differences)") for name in ("", ", bidirectional")},
    ("torchkbnufft KbNufft, learned trajectory", "backward_runs"): (
        "true (a limitation): the table interpolation Function's backward returns None for the trajectory omega, "
        "so a k-space trajectory cannot be learned through KbNufft; the message names the parameter, with a "
        "hand-written backward returning None among the causes it lists"),
    **{(f"FrEIA SequenceINN of {block}", "copy"): (
        "true: its blocks keep lambdas made in __init__ (a coupling block's f_clamp, AllInOneBlock's "
        "global_scale_activation), which pickle refuses: torch.save of a whole FrEIA model fails (its state_dict "
        "saves)") for block in ("AllInOneBlock", "GLOWCouplingBlock", "RNVPCouplingBlock", "NICECouplingBlock",
                                "GINCouplingBlock")},
}


# False alarms layercheck still gives, with what is known (fix pending): counted apart, never as passes.
# (kornia's DenseSIFTDescriptor was one until its steepness stopped growing the step: Note [steep at
# the base step]; lucidrains' En-transformer until the rounding floor emulated float32 rounding on the
# float64 run: Note [emulated rounding]; pytorch-metric-learning's ProxyNCALoss until the meta run that
# shows how its calls read a constant gave torch.nonzero a size.)
KNOWN_FALSE_ALARMS: dict[tuple[str, str], str] = {}
