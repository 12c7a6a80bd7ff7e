/* dsq.h - the public API of libdsq, in one include.
 *
 * libdsq is layered; each layer's header documents its part of the API:
 *
 *   common   dsq_error.h    status enum (pinned values), dsq_strerror, dsq_diag
 *            dsq_file.h     atomic output files (temp + fsync + rename), mmap
 *            dsq_thread.h   persistent worker pool
 *            dsq_sha256.h   SHA-256 (OpenSSL EVP)
 *   formats  safetensors.h  validated, zero-copy safetensors reader (shards, FP8 block scales)
 *            st_writer.h    spec-compliant safetensors writer (optional sharding)
 *            model_config.h config.json -> dsq_model_config (DeepSeek-V3/V2, Llama, Qwen2)
 *            container.h    the .dsq container: streaming writer with resume, reader, verify
 *            llama2c.h      llama2.c checkpoints -> Hugging Face Llama
 *   quant    scheme.h       the scheme table: quantize / dequantize / gemm per scheme
 *   engine   model.h        forward passes, KV cache, per-layer calibration hooks
 *            tokenizer.h    Hugging Face byte-level BPE and llama2.c tokenizers
 *            eval_metrics.h perplexity windows, KL divergence, base log-prob files
 *            gsm8k.h        lm-eval gsm8k v3.0 prompts, filters and scoring
 *   calib    calib.h        calibration statistics, AWQ, SmoothQuant
 *   convert  recipe.h       tensor -> scheme decisions by role
 *            convert.h      the streaming conversion pipeline behind ds-quant
 *
 * Conventions: functions return int status (DSQ_OK == 0, negative enum
 * dsq_status on failure) and fill an optional dsq_diag (clear it first);
 * the library never prints or exits; objects follow _create/_free or
 * _init/_release pairs. */
#ifndef DSQ_H
#define DSQ_H

#include "dsq_version.h"
#include "dsq_error.h"
#include "dsq_file.h"
#include "dsq_thread.h"
#include "dsq_sha256.h"
#include "safetensors.h"
#include "st_writer.h"
#include "model_config.h"
#include "container.h"
#include "llama2c.h"
#include "scheme.h"
#include "model.h"
#include "tokenizer.h"
#include "eval_metrics.h"
#include "gsm8k.h"
#if __has_include("calib.h")
#include "calib.h"
#endif
#include "recipe.h"
#include "convert.h"

#endif
