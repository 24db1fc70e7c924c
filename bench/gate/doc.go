// Package gate is the accuracy gate for quantized model versions: the pure-Go core of
// `server gate`. It compares what a candidate version (say int8) produced on a labeled
// dataset with what the baseline (say fp32) produced, and decides whether the candidate
// stays within an accuracy budget.
//
// The gate judges the budget against noise, not against a point estimate. The accuracy
// drop comes with a paired bootstrap confidence interval, and a candidate passes only when
// the interval's upper end, the largest drop the data cannot rule out, is within budget. A
// small dataset therefore cannot pass a tight budget by luck; the report says so when the
// point estimate alone would have passed.
//
// The package loads no model and needs no native library. Run runs each version of a model
// the caller loaded (package models) on the dataset (see LoadDataset); Classify and Embed
// judge outputs handed over as a ClassifyRun or an EmbedRun, from Run or from elsewhere.
// Each returns a Report, which WriteText, WriteMarkdown and WriteJSON lay out.
package gate
