-- The options shared by the OHEM losses (one C options struct, ploss_ohem_opts).
return {
  { "ignore_index", "int64", 255,
    doc = "samples with this label add nothing; 255 is the void label of the segmentation data sets " ..
      "this loss comes from" },
  { "score_thresh", "double", 0.7, min = 0, max = 1,
    doc = "τ: keep the samples whose probability of the label is ≤ τ" },
  { "n_min", "int64", -1, min = -1,
    doc = "keep at least the n_min hardest samples; -1 takes ⌊M/16⌋ of the M samples, ignored ones included" },
  { "lam", "double", 0.3, min = 0, doc = "λ, the weight of the large-margin regulariser (ohem_large_margin only)" },
}
