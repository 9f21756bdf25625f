/*
 * loss.h — what a loss entry point (core/losses.c, generated from the loss descriptions)
 * hands to the engine of its kernel shape: the loss's static facts, its tensors and its
 * checked options.  Internal.
 */
#ifndef PLOSS_LOSS_H
#define PLOSS_LOSS_H

#include "internal.h"
#include "loss_policies.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel shapes: the engines of core/engines/. */
typedef enum {
    PLOSS_SHAPE_ROWS = 0,
    PLOSS_SHAPE_ELEMENTWISE = 1,
    PLOSS_SHAPE_PAIRS = 2, /* N×D embeddings compared row with row or in tiles */
    PLOSS_SHAPE_BOXES = 3, /* N×4 boxes, one loss per box */
    PLOSS_SHAPE_REGION = 4, /* groups of pixels or their neighbourhoods, per class */
    PLOSS_SHAPE_MARGIN = 5, /* N×D embeddings against C×D class centres, softmax over cosines */
    PLOSS_SHAPE_SEQUENCE = 6, /* T×N×C frames against label sequences: recursions over time */
    PLOSS_SHAPE_COUNT
} ploss_shape;

/* What a loss's target is. */
typedef enum {
    PLOSS_LOSS_TARGET_INDEX = 0,            /* class indices, i64/i32, the sample shape        */
    PLOSS_LOSS_TARGET_INDEX_OR_PROBABILITIES, /* … or probabilities of the input's shape         */
    PLOSS_LOSS_TARGET_ELEMENTWISE,          /* float, the input's shape                          */
    PLOSS_LOSS_TARGET_LABELS,               /* one integer class label per embedding row         */
    PLOSS_LOSS_TARGET_NONE,                 /* no target argument                                */
    PLOSS_LOSS_TARGET_BOXES,                /* float N×4 boxes, as the input                     */
    PLOSS_LOSS_TARGET_SIGNS,                /* ±1 labels: any float dtype or i64/i32, per row
                                               or per element (an elementwise loss: the
                                               input's shape)                                 */
    PLOSS_LOSS_TARGET_CLASS_LABELS,         /* one class index per embedding row, or ignore_index */
    PLOSS_LOSS_TARGET_INDEX_LIST,           /* i64/i32 of the input's shape: each row's class
                                               indices, ended by the first negative value    */
    PLOSS_LOSS_TARGET_SEQUENCES             /* i64/i32 label sequences: N×S padded or 1-D
                                               concatenated, with their lengths (tensors)   */
} ploss_loss_target;

/* How the inputs of a loss of several inputs are laid out (the pairs shape). */
typedef enum {
    PLOSS_INPUT_LAYOUT_ROWS = 0,           /* N×D embeddings, one loss per row                 */
    PLOSS_INPUT_LAYOUT_ROWS_OR_VECTOR = 1, /* N×D, or D for one pair (its NONE loss 0-d)       */
    PLOSS_INPUT_LAYOUT_ELEMENTWISE = 2,    /* any shape, one loss per element                  */
    PLOSS_INPUT_LAYOUT_SEQUENCE = 3        /* T×N×C frames, or T×C for one sequence (0-d NONE) */
} ploss_input_layout;

/* Extra tensors between the target and the options. */
typedef enum {
    PLOSS_TENSOR_CLASS_VECTOR = 0, /* C values, one per class (weights, α, priors)          */
    PLOSS_TENSOR_BROADCAST = 1,    /* broadcast over the input (BCE's weight, pos_weight)   */
    PLOSS_TENSOR_SAMPLE_VECTOR = 2, /* N values, one per sample (a box's weight, ignore mask) */
    PLOSS_TENSOR_CLASS_IDS = 3,    /* a vector of class indices, any numeric dtype          */
    PLOSS_TENSOR_LENGTHS = 4       /* N integers (i64/i32): a length per sample              */
} ploss_tensor_kind;

#define PLOSS_MAX_LOSS_TENSORS 2
/* Inputs that each get a gradient (a loss of several embedding inputs: anchor, positive,
 * negative); a one-input loss uses `input` and `grad_input` of ploss_loss_args. */
#define PLOSS_MAX_LOSS_INPUTS 3
/* Per-row outputs of forward and fused besides the loss (a description's `outputs`). */
#define PLOSS_MAX_LOSS_OUTPUTS 2

/* The static facts of a loss (its description). */
typedef struct ploss_loss_spec {
    const char *name;
    ploss_shape shape;
    ploss_policy policy;
    ploss_loss_target target;
    int64_t min_classes;
    const char *min_classes_why; /* NULL, or why C must reach min_classes               */
    const char *state_name;      /* NULL: no saved state                                */
    int state_components;        /* per sample                                          */
    int ntensors;
    struct {
        const char *name;
        ploss_tensor_kind kind;
        const char *what;        /* "expected shape [C] (one <what> per class)"        */
        int required;
        int priors;              /* class priors: finite, >= 0, one > 0 (checked on the CPU) */
    } tensors[PLOSS_MAX_LOSS_TENSORS];
    int ninputs;                 /* 0: one input named "input"; else inputs[0..ninputs)   */
    const char *input_names[PLOSS_MAX_LOSS_INPUTS];
    const char *grad_names[PLOSS_MAX_LOSS_INPUTS];
    ploss_input_layout input_layout; /* of the inputs of a loss of several inputs        */
} ploss_loss_spec;

/* The tensors of one call; those a pass does not take are NULL. */
typedef struct ploss_loss_args {
    const DLTensor *input, *target;
    const DLTensor *tensors[PLOSS_MAX_LOSS_TENSORS];
    const DLTensor *loss;      /* output of forward and fused                          */
    const DLTensor *state;     /* output of forward, input of backward (optional)      */
    const DLTensor *grad_loss; /* backward                                              */
    const DLTensor *grad_input;/* output of backward and fused                          */
    /* a loss of several inputs (spec->ninputs > 0): its inputs and their gradients, in
     * argument order (input, grad_input and target unused; a labels target is `target`) */
    const DLTensor *inputs[PLOSS_MAX_LOSS_INPUTS];
    const DLTensor *grad_inputs[PLOSS_MAX_LOSS_INPUTS];
    /* its per-row outputs (forward, fused; NULL: not wanted) and the gradients of its extra
     * tensors that get one (backward, fused; NULL where the tensor is NULL) */
    const DLTensor *outputs[PLOSS_MAX_LOSS_OUTPUTS];
    const DLTensor *grad_tensors[PLOSS_MAX_LOSS_TENSORS];
} ploss_loss_args;

/* The checked options of a loss, in the engines' terms (the union of every loss's). */
typedef struct ploss_loss_params {
    ploss_reduction reduction;
    int64_t ignore_index;
    double label_smoothing;
    int smoothing_convention; /* ploss_smoothing_convention */
    double alpha, gamma;
    int convention;           /* ploss_focal_convention */
    double eps;
    double lam;
    int order;                /* Taylor order */
    double score_thresh;
    int64_t n_min;
    double scale;
    int inplace;
    /* metric learning (the pairs shape) */
    double margin;            /* the hinge's margin (triplet losses, multi_margin_loss) */
    int soft_margin;          /* 1: softplus(·) in place of the hinge max(0, · + margin) */
    double p_norm;            /* the p of the p-norm distance                              */
    int swap;                 /* distance swap (Balntas et al.)                             */
    int distance;             /* ploss_pair_distance, or ploss_triplet_distance             */
    double temperature;
    int symmetric;
    int normalize;
    int box_format;           /* ploss_box_format */
    int ciou_gradient;        /* ploss_ciou_gradient */
    double beta;              /* smooth_l1_loss's β */
    double delta;             /* huber_loss's δ */
    int log_target;           /* kl_div: the target holds log-probabilities */
    int log_input;            /* poisson_nll_loss: the input is log λ (else λ) */
    int full;                 /* poisson_nll_loss: add the Stirling term of log(y!) */
    int power;                /* multi_margin_loss's p */
    int classes;              /* region: which classes count (ploss_lovasz_classes) */
    int per_image;            /* region: one group per sample rather than the whole batch */
    double exponent, smooth;  /* soft Dice: p of s^p, the smoothing term */
    int mask_ignored;         /* soft Dice: ignored pixels leave the denominator too */
    int class_weights;        /* soft Dice: ploss_dice_class_weights */
    double kl_margin, lambda_same, lambda_diff; /* affinity field loss */
    int divergence;           /* affinity field loss: ploss_affinity_divergence */
    int kernel_size;          /* affinity loss: the window */
    /* margin softmax (the margin shape): target cosine cos(m1·θ + m2) − m3, scale s */
    double margin_scale, margin_m1, margin_m2, margin_m3;
    int easy_margin;
    int weight_layout;        /* ploss_weight_layout                                        */
    int64_t tile_rows;        /* rows of a cosine tile; 0: automatic                         */
    double sample_rate;       /* Partial FC: the share of the classes kept (1: all)          */
    int64_t seed;             /* Partial FC: the seed of the drawn classes                   */
    ploss_comm_t *comm;       /* NULL, or the ranks the classes are sharded over              */
    int scale_grad_x_by_ranks; /* with comm: ∂x times the number of ranks                   */
    /* linear cross-entropy (the margin shape without normalisation or margin) */
    double softcap;           /* c·tanh(z/c) of every logit; 0: none                         */
    double z_loss;            /* the weight of lse² per row                                  */
    int accumulate;           /* grad_weight += rather than =                                */
    int linear_policy;        /* ploss_linear_policy: the row loss of the linear + loss        */
    /* CTC (the sequence shape) */
    int64_t blank;            /* the blank's class index                                     */
    int zero_infinity;        /* an infinite loss and its gradient become 0                  */
    int logits;               /* the input holds logits: their log_softmax is taken inside     */
} ploss_loss_params;

/* The checks every loss shares, in every pass: reduction in range, a finite scale and
 * inplace 0 or 1 (the last two read by the fused pass only). */
ploss_status ploss_check_common_options(ploss_reduction reduction, double scale, int inplace);

/* Validate the call and run it on the engine of spec->shape (core/engines/). */
ploss_status ploss_run_loss(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                            const ploss_loss_args *a, const ploss_loss_params *p);

/* Whether the engine of `shape` has the maths of a policy's loss: ploss_run_loss refuses a
 * call its engine would otherwise compute as another loss.  One function per shape. */
int ploss_engine_computes(ploss_shape shape, ploss_policy policy);
int ploss_rows_computes(ploss_policy policy);
int ploss_elementwise_computes(ploss_policy policy);
int ploss_pairs_computes(ploss_policy policy);
int ploss_boxes_computes(ploss_policy policy);
int ploss_region_computes(ploss_policy policy);
int ploss_margin_computes(ploss_policy policy);
int ploss_sequence_computes(ploss_policy policy);

/* The engines' fronts, one per kernel shape. */
ploss_status ploss_rows_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                            const ploss_loss_args *a, const ploss_loss_params *p);
ploss_status ploss_elementwise_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                                   const ploss_loss_args *a, const ploss_loss_params *p);
ploss_status ploss_pairs_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                             const ploss_loss_args *a, const ploss_loss_params *p);
ploss_status ploss_boxes_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                             const ploss_loss_args *a, const ploss_loss_params *p);
ploss_status ploss_region_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                              const ploss_loss_args *a, const ploss_loss_params *p);
ploss_status ploss_margin_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                              const ploss_loss_args *a, const ploss_loss_params *p);
ploss_status ploss_sequence_run(ploss_ctx_t *ctx, ploss_pass pass, const ploss_loss_spec *spec,
                                const ploss_loss_args *a, const ploss_loss_params *p);

#ifdef __cplusplus
}
#endif

#endif
