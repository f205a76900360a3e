// LoadConfig (runtime/train/config.cc): shipped configs, defaults, every error class with its
// exact "file:line:col: key: problem" text, --set overrides, and the resolved_yaml round trip.
// links: tessera_train
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/train/config.h"
#include "runtime/train/config_emit.h"
#include "runtime/core/suggest.h"
#include "runtime/core/yaml_reader.h"
#include "tests/testing/expect_text.h"

namespace tessera {
namespace {


// Writes `text` to a file named after the running test and returns its path.
std::string WriteTemp(const std::string& text, const std::string& suffix = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string path = ::testing::TempDir() + "tessera_config_" + info->test_suite_name() +
                           "_" + info->name() + suffix + ".yaml";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return path;
}

// Loads `text` and returns the error message (failing the test if it loaded).
std::string LoadError(const std::string& text, const std::vector<std::string>& overrides = {},
                      std::string* path_out = nullptr) {
  const std::string path = WriteTemp(text);
  if (path_out != nullptr) *path_out = path;
  Result<Config> c = LoadConfig(path, overrides);
  EXPECT_FALSE(c.ok()) << "expected an error for:\n" << text;
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().message();
  return c.status().message();
}

// The error message with the temp path replaced by "F", so expectations read like the output.
std::string ErrorAt(const std::string& text, const std::vector<std::string>& overrides = {}) {
  std::string path;
  std::string msg = LoadError(text, overrides, &path);
  if (msg.rfind(path, 0) == 0) msg = "F" + msg.substr(path.size());
  return msg;
}

Config LoadOk(const std::string& text, const std::vector<std::string>& overrides = {}) {
  Result<Config> c = LoadConfig(WriteTemp(text), overrides);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : Config{};
}

std::string Shipped(const std::string& name) {
  return std::string(TESSERA_SOURCE_DIR) + "/configs/" + name;
}

// Every field of everything LoadConfig fills, except path and resolved_yaml.
void ExpectSameConfig(const Config& a, const Config& b) {
  EXPECT_EQ(a.model.family, b.model.family);
  EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
  EXPECT_EQ(a.model.max_seq_len, b.model.max_seq_len);
  EXPECT_EQ(a.model.num_layers, b.model.num_layers);
  EXPECT_EQ(a.model.hidden_size, b.model.hidden_size);
  EXPECT_EQ(a.model.num_heads, b.model.num_heads);
  EXPECT_EQ(a.model.num_kv_heads, b.model.num_kv_heads);
  EXPECT_EQ(a.model.ffn_hidden_size, b.model.ffn_hidden_size);
  EXPECT_EQ(a.model.norm_eps, b.model.norm_eps);
  EXPECT_EQ(a.model.rope_theta, b.model.rope_theta);
  EXPECT_EQ(a.model.tie_embeddings, b.model.tie_embeddings);
  EXPECT_EQ(a.model.init_std, b.model.init_std);
  EXPECT_EQ(a.model.recompute, b.model.recompute);
  EXPECT_EQ(a.optimizer.lr, b.optimizer.lr);
  EXPECT_EQ(a.optimizer.beta1, b.optimizer.beta1);
  EXPECT_EQ(a.optimizer.beta2, b.optimizer.beta2);
  EXPECT_EQ(a.optimizer.eps, b.optimizer.eps);
  EXPECT_EQ(a.optimizer.weight_decay, b.optimizer.weight_decay);
  EXPECT_EQ(a.optimizer.decay_norms, b.optimizer.decay_norms);
  EXPECT_EQ(a.optimizer.decay_biases, b.optimizer.decay_biases);
  EXPECT_EQ(a.optimizer.decay_embeddings, b.optimizer.decay_embeddings);
  EXPECT_EQ(a.optimizer.grad_clip, b.optimizer.grad_clip);
  EXPECT_EQ(a.schedule.warmup_steps, b.schedule.warmup_steps);
  EXPECT_EQ(a.schedule.decay, b.schedule.decay);
  EXPECT_EQ(a.schedule.min_lr_ratio, b.schedule.min_lr_ratio);
  EXPECT_EQ(a.schedule.decay_steps, b.schedule.decay_steps);
  EXPECT_EQ(a.data.source, b.data.source);
  EXPECT_EQ(a.data.train_path, b.data.train_path);
  EXPECT_EQ(a.data.val_path, b.data.val_path);
  EXPECT_EQ(a.data.synthetic.branching, b.data.synthetic.branching);
  EXPECT_EQ(a.data.synthetic.order, b.data.synthetic.order);
  EXPECT_EQ(a.data.synthetic.concentration, b.data.synthetic.concentration);
  EXPECT_EQ(a.data.synthetic.seed, b.data.synthetic.seed);
  EXPECT_EQ(a.data.synthetic.num_tokens, b.data.synthetic.num_tokens);
  EXPECT_EQ(a.train.steps, b.train.steps);
  EXPECT_EQ(a.train.micro_batch_size, b.train.micro_batch_size);
  EXPECT_EQ(a.train.grad_accum_steps, b.train.grad_accum_steps);
  EXPECT_EQ(a.train.seq_len, b.train.seq_len);
  EXPECT_EQ(a.train.seed, b.train.seed);
  EXPECT_EQ(a.train.log_interval, b.train.log_interval);
  EXPECT_EQ(a.train.eval_interval, b.train.eval_interval);
  EXPECT_EQ(a.train.eval_batches, b.train.eval_batches);
  EXPECT_EQ(a.train.threads, b.train.threads);
  EXPECT_EQ(a.train.out_dir, b.train.out_dir);
  EXPECT_EQ(a.train.peak_gflops, b.train.peak_gflops);
  EXPECT_EQ(a.train.on_nonfinite, b.train.on_nonfinite);
  EXPECT_EQ(a.train.max_nonfinite_skips, b.train.max_nonfinite_skips);
  EXPECT_EQ(a.train.spike_zscore, b.train.spike_zscore);
  EXPECT_EQ(a.train.spike_window, b.train.spike_window);
  EXPECT_EQ(a.train.spike_action, b.train.spike_action);
  EXPECT_EQ(a.init_from, b.init_from);
  EXPECT_EQ(a.optimizer.offload, b.optimizer.offload);
  EXPECT_EQ(a.parallel.dp, b.parallel.dp);
  EXPECT_EQ(a.parallel.tp, b.parallel.tp);
  EXPECT_EQ(a.parallel.pp, b.parallel.pp);
  EXPECT_EQ(a.parallel.ep, b.parallel.ep);
  EXPECT_EQ(a.parallel.zero, b.parallel.zero);
  EXPECT_EQ(a.comm.timeout_s, b.comm.timeout_s);
  EXPECT_EQ(a.comm.bucket_mb, b.comm.bucket_mb);
  EXPECT_EQ(a.precision, b.precision);
  EXPECT_EQ(a.mixed_precision.reduce_in_low, b.mixed_precision.reduce_in_low);
  EXPECT_EQ(a.mixed_precision.loss_scale, b.mixed_precision.loss_scale);
  EXPECT_EQ(a.mixed_precision.initial_scale, b.mixed_precision.initial_scale);
  EXPECT_EQ(a.mixed_precision.growth_interval, b.mixed_precision.growth_interval);
  EXPECT_EQ(a.mixed_precision.min_scale, b.mixed_precision.min_scale);
  EXPECT_EQ(a.checkpoint.dir, b.checkpoint.dir);
  EXPECT_EQ(a.checkpoint.interval_steps, b.checkpoint.interval_steps);
  EXPECT_EQ(a.checkpoint.at_end, b.checkpoint.at_end);
  EXPECT_EQ(a.checkpoint.keep_last, b.checkpoint.keep_last);
  EXPECT_EQ(a.checkpoint.keep_every, b.checkpoint.keep_every);
  EXPECT_EQ(a.checkpoint.async, b.checkpoint.async);
  EXPECT_EQ(a.checkpoint.on_busy, b.checkpoint.on_busy);
  EXPECT_EQ(a.checkpoint.max_failures, b.checkpoint.max_failures);
  EXPECT_EQ(a.resume, b.resume);
  EXPECT_EQ(a.init_optimizer, b.init_optimizer);
}

// ---- shipped configs and defaults -------------------------------------------------------------

TEST(ConfigShipped, TinyIsTheDefaultGpt2Job) {
  Result<Config> c = LoadConfig(Shipped("tiny.yaml"));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model.family, ModelFamily::kGpt2);
  EXPECT_EQ(c->model.vocab_size, 256);
  EXPECT_EQ(c->model.num_layers, 2);
  EXPECT_TRUE(c->model.tie_embeddings);
  EXPECT_EQ(c->data.source, DataSource::kSynthetic);
  EXPECT_EQ(c->data.synthetic.branching, 8);
  EXPECT_EQ(c->data.synthetic.seed, 7u);
  EXPECT_EQ(c->train.steps, 2000);
  EXPECT_EQ(c->train.out_dir, "runs/tiny");
  EXPECT_FLOAT_EQ(c->optimizer.lr, 3e-3f);
  EXPECT_EQ(c->path, Shipped("tiny.yaml"));
}

TEST(ConfigShipped, Gpt2SmallHasGpt2Shapes) {
  Result<Config> c = LoadConfig(Shipped("gpt2-124m.yaml"));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model.vocab_size, 50257);
  EXPECT_EQ(c->model.max_seq_len, 1024);
  EXPECT_EQ(c->model.num_layers, 12);
  EXPECT_EQ(c->model.hidden_size, 768);
  EXPECT_EQ(c->model.num_heads, 12);
  EXPECT_EQ(c->model.ffn_size(), 3072);
  EXPECT_EQ(c->train.seq_len, 256);
  EXPECT_EQ(c->train.micro_batch_size, 4);
  EXPECT_EQ(c->data.synthetic.branching, 16);
  EXPECT_FLOAT_EQ(c->optimizer.lr, 6e-4f);
  EXPECT_FLOAT_EQ(c->optimizer.beta2, 0.95f);
  EXPECT_FLOAT_EQ(c->optimizer.weight_decay, 0.1f);
}

TEST(ConfigShipped, LlamaTinyIsUntiedGqa) {
  Result<Config> c = LoadConfig(Shipped("llama-tiny.yaml"));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model.family, ModelFamily::kLlama);
  EXPECT_EQ(c->model.kv_heads(), 2);
  EXPECT_FALSE(c->model.tie_embeddings);
  EXPECT_FLOAT_EQ(c->model.rope_theta, 10000.0f);
  EXPECT_EQ(c->model.ffn_size(), 192);
}

TEST(ConfigDefaults, EverySectionIsOptional) {
  // Only an unrelated key: everything else must equal the struct defaults.
  Config c = LoadOk("init_from: weights/model.safetensors\n");
  Config d;
  d.init_from = "weights/model.safetensors";
  ExpectSameConfig(c, d);
  // Null sections ("model:" with nothing under it) read as empty too.
  ExpectSameConfig(LoadOk("model:\ntrain:\ndata:\n  synthetic:\ninit_from: weights/model.safetensors\n"),
                   d);
}

TEST(ConfigDefaults, TieEmbeddingsFollowsFamilyUnlessGiven) {
  EXPECT_TRUE(LoadOk("model: {family: gpt2}\n").model.tie_embeddings);
  EXPECT_FALSE(LoadOk("model: {family: llama}\n").model.tie_embeddings);
  EXPECT_TRUE(LoadOk("model: {family: llama, tie_embeddings: true}\n").model.tie_embeddings);
  EXPECT_FALSE(LoadOk("model: {family: gpt2, tie_embeddings: false}\n").model.tie_embeddings);
}

TEST(ConfigDefaults, RelativePathsStayAsWritten) {
  Config c = LoadOk("data:\n  source: shards\n  train: data/../shards/train\n  val: ./val.bin\n"
                    "init_from: ckpt/model.safetensors.index.json\n");
  EXPECT_EQ(c.data.source, DataSource::kShards);
  EXPECT_EQ(c.data.train_path, "data/../shards/train");
  EXPECT_EQ(c.data.val_path, "./val.bin");
  EXPECT_EQ(c.init_from, "ckpt/model.safetensors.index.json");
}

// ---- file-level errors ------------------------------------------------------------------------

TEST(ConfigFile, MissingFileIsNotFound) {
  const std::string path = ::testing::TempDir() + "tessera_config_no_such_file.yaml";
  std::remove(path.c_str());
  Result<Config> c = LoadConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.status().message(), path + ": cannot read config: file not found");
}

TEST(ConfigFile, DirectoryIsNotAConfig) {
  Result<Config> c = LoadConfig(::testing::TempDir());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.status().message(),
            ::testing::TempDir() + ": cannot read config: is a directory, not a regular file");
}

// A config path that names a FIFO must not hang the loader (nothing will ever write to it),
// and /dev/zero must not be read into memory until it runs out.
TEST(ConfigFile, FifoAndDeviceAreRefusedAtOnce) {
  const std::string fifo = ::testing::TempDir() + "tessera_config_fifo.yaml";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<Config> c = LoadConfig(fifo);
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.status().message(), fifo + ": cannot read config: is a FIFO, not a regular file");
  std::remove(fifo.c_str());
  c = LoadConfig("/dev/zero");
  EXPECT_EQ(c.status().message(),
            "/dev/zero: cannot read config: is a character device, not a regular file");
}

TEST(ConfigFile, AHugeFileIsRefusedBeforeItIsRead) {
  const std::string path = ::testing::TempDir() + "tessera_config_huge.yaml";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(::ftruncate(fileno(f), 64 << 20), 0);  // 64 MiB of zeros, sparse
    std::fclose(f);
  }
  Result<Config> c = LoadConfig(path);
  EXPECT_EQ(c.status().message(),
            path + ": cannot read config: 67108864 bytes, larger than the 1048576 bytes allowed");
  std::remove(path.c_str());
}

// yaml-cpp reads the first document and ignores the rest; tags are decoration to it. Either
// would load a file that means something else without a word.
TEST(ConfigFile, ASecondDocumentIsRefusedWhereItStarts) {
  EXPECT_STARTS_WITH(ErrorAt("train:\n  steps: 5\n---\ntrain:\n  steps: 6\n"),
                     "F:3:1: a second YAML document");
  EXPECT_STARTS_WITH(ErrorAt("train:\n  steps: 5\n...\ntrain:\n  steps: 6\n"),
                     "F:4:1: a second YAML document");
  // One document with an explicit start marker is fine.
  EXPECT_TRUE(LoadConfigFromText("---\ntrain:\n  steps: 5\n", "F").ok());
}

TEST(ConfigFile, TagsAreRefusedWhereTheyAre) {
  EXPECT_EQ(ErrorAt("train:\n  steps: !!str 5\n"),
            "F:2:10: YAML tag \"tag:yaml.org,2002:str\" is not allowed (write plain values: "
            "numbers, words, true/false, quoted strings)");
  EXPECT_STARTS_WITH(ErrorAt("model: !custom\n  num_layers: 2\n"), "F:1:8: YAML tag \"!custom\"");
  EXPECT_STARTS_WITH(ErrorAt("x: !!python/object:os.system [ls]\n"), "F:1:4: YAML tag");
}

TEST(ConfigFile, BinaryBytesAndDeepNestingAreRefused) {
  EXPECT_EQ(ErrorAt(std::string("train:\n  steps: 5\0\n", 19)),
            "F:2:11: byte 0x00 is not printable UTF-8 text (a binary file?)");
  EXPECT_EQ(ErrorAt("out: \"caf\xc3\""), "F:1:10: byte 0xc3 is not printable UTF-8 text (a binary file?)");
  EXPECT_TRUE(LoadConfigFromText("train:\n  out_dir: \"caf\xc3\xa9\"\n", "F").ok());
  std::string deep(100, '[');
  deep += std::string(100, ']');
  EXPECT_STARTS_WITH(ErrorAt("x: " + deep + "\n"), "F:1:");
  EXPECT_NE(ErrorAt("x: " + deep + "\n").find("nested more than 64 levels deep"), std::string::npos);
}

// Escapes spell bytes the file may not hold: a NUL would cut the path short where the OS reads
// it; a DEL was written back raw into the resolved config, which then did not load (found by
// tests/fuzz/config_fuzz.cc; tests/fuzz/regressions/config).
TEST(ConfigFile, ControlCharactersSpelledByEscapesAreRefusedInStrings) {
  EXPECT_EQ(ErrorAt("train:\n  out_dir: \"runs/a\\0b\"\n"),
            "F:2:12: train.out_dir: byte 0x00 at offset 6 of the value is a control character or "
            "not UTF-8 (write printable text)");
  EXPECT_STARTS_WITH(ErrorAt("checkpoint:\n  dir: \"ck\\x7f\"\n"),
                     "F:2:8: checkpoint.dir: byte 0x7f at offset 2 of the value");
  EXPECT_STARTS_WITH(ErrorAt("init_from: \"a\\x01\"\n"), "F:1:12: init_from: byte 0x01");
  // Printable escapes are text like any other, and round-trip through the resolved config.
  Result<Config> ok = LoadConfigFromText("train:\n  out_dir: \"caf\\xe9\\t\\\"x\"\n", "F");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->train.out_dir, "caf\xc3\xa9\t\"x");
  Result<Config> again = LoadConfigFromText(ok->resolved_yaml, "F");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->train.out_dir, ok->train.out_dir);
}

// A value that is inside its range as written but outside it as the float training uses.
TEST(ConfigFile, AValueThatRoundsOutOfItsRangeIsRefused) {
  EXPECT_EQ(ErrorAt("optimizer:\n  beta1: 0.99999999999\n"),
            "F:2:10: optimizer.beta1: must be in [0, 1), got 0.99999999999, which is 1.0 as the "
            "32-bit float training uses");
  EXPECT_EQ(ErrorAt("optimizer:\n  beta2: 0.999999999\n"),
            "F:2:10: optimizer.beta2: must be in [0, 1), got 0.999999999, which is 1.0 as the "
            "32-bit float training uses");
  EXPECT_TRUE(LoadConfigFromText("optimizer:\n  beta2: 0.9999999\n", "F").ok());
}

TEST(ConfigFile, MalformedYamlNamesThePosition) {
  EXPECT_STARTS_WITH(ErrorAt("model:\n  num_layers: [1, 2\n"), "F:3:1: malformed YAML: ");
  EXPECT_EQ(ErrorAt("model: a: b\n"), "F:1:9: malformed YAML: illegal map value");
}

TEST(ConfigFile, EmptyOrCommentOnlyIsAnError) {
  EXPECT_CONTAINS(ErrorAt(""), "F: config is empty");
  EXPECT_CONTAINS(ErrorAt("# nothing but a comment\n"), "F: config is empty");
}

TEST(ConfigFile, TopLevelMustBeAMap) {
  EXPECT_EQ(ErrorAt("- model\n- train\n"),
            "F:1:1: expected a map of sections (model, optimizer, schedule, data, train, parallel, comm, "
            "init_from) at the top level, got a sequence");
  EXPECT_CONTAINS(ErrorAt("just words\n"), "at the top level, got \"just words\"");
}

// ---- unknown keys -----------------------------------------------------------------------------

TEST(ConfigUnknownKey, TypoGetsASuggestion) {
  EXPECT_EQ(ErrorAt("model:\n  hidden_size: 64\n  num_layer: 2\n"),
            "F:3:3: model.num_layer: unknown key (did you mean \"num_layers\"?)");
  EXPECT_EQ(ErrorAt("trian:\n  steps: 5\n"), "F:1:1: trian: unknown key (did you mean \"train\"?)");
  EXPECT_EQ(ErrorAt("data:\n  synthetic:\n    brnaching: 4\n"),
            "F:3:5: data.synthetic.brnaching: unknown key (did you mean \"branching\"?)");
  // Transposition counts as one edit, like keep_lats -> keep_last.
  EXPECT_EQ(ErrorAt("optimizer: {wieght_decay: 0.1}\n"),
            "F:1:13: optimizer.wieght_decay: unknown key (did you mean \"weight_decay\"?)");
}

TEST(ConfigUnknownKey, FarOffKeyListsTheValidOnes) {
  EXPECT_EQ(ErrorAt("schedule:\n  banana: 3\n"),
            "F:2:3: schedule.banana: unknown key (valid keys of schedule: warmup_steps, decay, "
            "min_lr_ratio, decay_steps)");
}

TEST(ConfigUnknownKey, DuplicateKeyIsAnError) {
  EXPECT_EQ(ErrorAt("train:\n  steps: 5\n  steps: 6\n"),
            "F:3:3: train.steps: duplicate key (each key may appear once)");
}

// ---- types and ranges -------------------------------------------------------------------------

TEST(ConfigType, WrongTypesNameKeyAndValue) {
  EXPECT_EQ(ErrorAt("train:\n  steps: abc\n"),
            "F:2:10: train.steps: expected an integer, got \"abc\"");
  EXPECT_EQ(ErrorAt("train:\n  steps: 5.0\n"),
            "F:2:10: train.steps: expected an integer, got \"5.0\"");
  EXPECT_EQ(ErrorAt("train:\n  seed: -1\n"),
            "F:2:9: train.seed: expected a non-negative integer, got \"-1\"");
  EXPECT_EQ(ErrorAt("model:\n  num_layers: {a: 1}\n"),
            "F:2:15: model.num_layers: expected an integer, got a map");
  EXPECT_EQ(ErrorAt("model:\n  num_layers: [1]\n"),
            "F:2:15: model.num_layers: expected an integer, got a sequence");
  EXPECT_EQ(ErrorAt("train:\n  steps: \"5\"\n"),
            "F:2:10: train.steps: expected an integer, got the quoted string \"5\"");
  EXPECT_EQ(ErrorAt("model:\n  tie_embeddings: yes\n"),
            "F:2:19: model.tie_embeddings: expected a boolean (true or false), got \"yes\"");
  EXPECT_EQ(ErrorAt("optimizer:\n  lr: fast\n"), "F:2:7: optimizer.lr: expected a number, got \"fast\"");
  EXPECT_EQ(ErrorAt("optimizer:\n  lr: .nan\n"), "F:2:7: optimizer.lr: expected a number, got \".nan\"");
  EXPECT_EQ(ErrorAt("optimizer:\n  lr:\n"),
            "F:2:3: optimizer.lr: expected a number, got nothing (null)");
  EXPECT_EQ(ErrorAt("train:\n  out_dir: [a, b]\n"),
            "F:2:12: train.out_dir: expected a string, got a sequence");
  EXPECT_EQ(ErrorAt("model: 3\n"), "F:1:8: model: expected a map, got \"3\"");
  EXPECT_EQ(ErrorAt("train:\n  out_dir:\n"), "F:2:3: train.out_dir: must not be empty");
  EXPECT_EQ(ErrorAt("train:\n  steps: 99999999999999999999\n"),
            "F:2:10: train.steps: integer out of range, got \"99999999999999999999\"");
  EXPECT_EQ(ErrorAt("model:\n  norm_eps: 1e60\n"),
            "F:2:13: model.norm_eps: number out of range for a 32-bit float, got \"1e60\"");
}

TEST(ConfigType, EnumErrorsListTheAllowedValues) {
  EXPECT_EQ(ErrorAt("model:\n  family: gtp2\n"),
            "F:2:11: model.family: expected one of gpt2 | llama, got \"gtp2\" (did you mean "
            "\"gpt2\"?)");
  EXPECT_EQ(ErrorAt("schedule: {decay: exponential}\n"),
            "F:1:19: schedule.decay: expected one of cosine | linear | constant, got "
            "\"exponential\"");
  EXPECT_EQ(ErrorAt("data: {source: [a]}\n"),
            "F:1:16: data.source: expected one of synthetic | shards, got a sequence");
}

TEST(ConfigRange, OutOfRangeNamesBoundAndValue) {
  EXPECT_EQ(ErrorAt("model:\n  num_heads: 0\n"), "F:2:14: model.num_heads: must be >= 1, got 0");
  EXPECT_EQ(ErrorAt("model:\n  vocab_size: 1\n"), "F:2:15: model.vocab_size: must be >= 2, got 1");
  EXPECT_EQ(ErrorAt("train:\n  steps: -3\n"), "F:2:10: train.steps: must be >= 1, got -3");
  EXPECT_EQ(ErrorAt("data:\n  synthetic:\n    order: 3\n"),
            "F:3:12: data.synthetic.order: must be <= 2, got 3");
  EXPECT_EQ(ErrorAt("optimizer:\n  beta2: 1.0\n"),
            "F:2:10: optimizer.beta2: must be in [0, 1), got 1.0");
  EXPECT_EQ(ErrorAt("optimizer:\n  lr: 0\n"), "F:2:7: optimizer.lr: must be > 0, got 0");
  EXPECT_EQ(ErrorAt("optimizer:\n  weight_decay: -0.1\n"),
            "F:2:17: optimizer.weight_decay: must be >= 0, got -0.1");
  EXPECT_EQ(ErrorAt("schedule:\n  min_lr_ratio: 1.5\n"),
            "F:2:17: schedule.min_lr_ratio: must be in [0, 1], got 1.5");
  EXPECT_EQ(ErrorAt("train:\n  threads: -1\n"), "F:2:12: train.threads: must be >= 0, got -1");
  // Boundaries that are allowed.
  Config c = LoadOk("optimizer: {beta1: 0, grad_clip: 0}\nschedule: {min_lr_ratio: 1}\n"
                    "train: {eval_interval: 0, threads: 0}\n");
  EXPECT_EQ(c.optimizer.beta1, 0.0f);
  EXPECT_EQ(c.schedule.min_lr_ratio, 1.0f);
}

// ---- cross-field checks -----------------------------------------------------------------------

TEST(ConfigCrossField, HeadsMustDivideWidth) {
  EXPECT_EQ(ErrorAt("model:\n  hidden_size: 64\n  num_heads: 3\n"),
            "F:3:14: model.num_heads: num_heads=3 does not divide hidden_size=64");
  // num_heads not written: the error points at the key that was.
  EXPECT_EQ(ErrorAt("model:\n  hidden_size: 66\n"),
            "F:2:16: model.hidden_size: num_heads=4 does not divide hidden_size=66");
}

TEST(ConfigCrossField, KvHeadsMustDivideHeads) {
  EXPECT_EQ(ErrorAt("model:\n  family: llama\n  num_heads: 4\n  num_kv_heads: 3\n"),
            "F:4:17: model.num_kv_heads: num_kv_heads=3 does not divide num_heads=4");
}

TEST(ConfigCrossField, Gpt2HasNoGqa) {
  EXPECT_EQ(ErrorAt("model:\n  family: gpt2\n  num_kv_heads: 2\n"),
            "F:3:17: model.num_kv_heads: gpt2 has no grouped-query attention: num_kv_heads=2 "
            "must equal num_heads=4 (or be 0)");
  EXPECT_EQ(LoadOk("model: {family: gpt2, num_kv_heads: 4}\n").model.kv_heads(), 4);
}

TEST(ConfigCrossField, LlamaNeedsEvenHeadSize) {
  EXPECT_EQ(ErrorAt("model:\n  family: llama\n  hidden_size: 36\n  num_heads: 4\n"),
            "F:3:16: model.hidden_size: llama needs an even head size for RoPE, got "
            "hidden_size=36 / num_heads=4 = 9");
  // The same shape is fine for gpt2 (learned positions).
  EXPECT_EQ(LoadOk("model:\n  hidden_size: 36\n  num_heads: 4\n").model.head_size(), 9);
}

TEST(ConfigCrossField, SeqLenWithinMaxSeqLen) {
  EXPECT_EQ(ErrorAt("model:\n  max_seq_len: 32\ntrain:\n  seq_len: 48\n"),
            "F:4:12: train.seq_len: seq_len=48 exceeds model.max_seq_len=32");
  // Default seq_len (64) against a written max_seq_len: points at max_seq_len.
  EXPECT_EQ(ErrorAt("model:\n  max_seq_len: 32\n"),
            "F:2:16: model.max_seq_len: seq_len=64 exceeds model.max_seq_len=32");
}

TEST(ConfigCrossField, ShardsNeedATrainPath) {
  EXPECT_EQ(ErrorAt("data:\n  source: shards\n"),
            "F:2:11: data.source: source=shards needs data.train (a shard file or directory)");
  EXPECT_EQ(ErrorAt("data:\n  source: shards\n  train:\n"),
            "F:3:3: data.train: source=shards needs data.train (a shard file or directory)");
}

TEST(ConfigCrossField, BranchingWithinVocab) {
  EXPECT_EQ(ErrorAt("model:\n  vocab_size: 8\ndata:\n  synthetic:\n    branching: 9\n"),
            "F:5:16: data.synthetic.branching: branching=9 exceeds model.vocab_size=8");
  // Irrelevant when the data are shards.
  EXPECT_EQ(LoadOk("model: {vocab_size: 8}\ndata: {source: shards, train: t.bin, "
                   "synthetic: {branching: 9}}\n").data.synthetic.branching, 9);
}

TEST(ConfigCrossField, SyntheticCorpusHoldsOneSequence) {
  EXPECT_EQ(ErrorAt("data:\n  synthetic:\n    num_tokens: 64\n"),
            "F:3:17: data.synthetic.num_tokens: num_tokens=64 is too few for one sequence of "
            "train.seq_len=64 (needs seq_len + 1)");
}

TEST(ConfigCrossField, WarmupAndDecayOrder) {
  EXPECT_EQ(LoadOk("schedule: {warmup_steps: 100}\ntrain: {steps: 100}\n").schedule.warmup_steps,
            100);
  EXPECT_EQ(ErrorAt("schedule:\n  warmup_steps: 20\n  decay_steps: 10\n"),
            "F:3:16: schedule.decay_steps: decay_steps=10 ends the decay before "
            "warmup_steps=20 ends the warmup");
}

// ---- overrides --------------------------------------------------------------------------------

TEST(ConfigOverride, SetsExistingAndNewKeys) {
  Config c = LoadOk("model:\n  family: gpt2\ntrain:\n  steps: 100\n",
                    {"train.steps=5", "model.family=llama", "data.synthetic.seed=9",
                     "optimizer.lr=2.5e-4", "train.out_dir=runs/x", "init_from=w.safetensors"});
  EXPECT_EQ(c.train.steps, 5);
  EXPECT_EQ(c.model.family, ModelFamily::kLlama);
  EXPECT_FALSE(c.model.tie_embeddings);  // family default follows the override
  EXPECT_EQ(c.data.synthetic.seed, 9u);
  EXPECT_FLOAT_EQ(c.optimizer.lr, 2.5e-4f);
  EXPECT_EQ(c.train.out_dir, "runs/x");
  EXPECT_EQ(c.init_from, "w.safetensors");
}

TEST(ConfigOverride, LaterOverrideWinsAndFlowMapsWork) {
  Config c = LoadOk("train: {steps: 100}\n",
                    {"train.steps=7", "train.steps=8", "model={num_layers: 3, hidden_size: 32}"});
  EXPECT_EQ(c.train.steps, 8);
  EXPECT_EQ(c.model.num_layers, 3);
  EXPECT_EQ(c.model.hidden_size, 32);
}

TEST(ConfigOverride, ShortRunKeepsTheLongerWarmup) {
  // A smoke run of a config tuned for a long run just works: the run ends while warming up.
  const std::string text = "schedule:\n  warmup_steps: 30\ntrain:\n  steps: 600\n";
  Config c = LoadOk(text, {"train.steps=5"});
  EXPECT_EQ(c.train.steps, 5);
  EXPECT_EQ(c.schedule.warmup_steps, 30);
}

TEST(ConfigOverride, UnknownKeyIsReportedAtTheOverride) {
  EXPECT_EQ(ErrorAt("train:\n  steps: 5\n", {"train.stepz=5"}),
            "--set train.stepz=5: train.stepz: unknown key (did you mean \"steps\"?)");
  EXPECT_EQ(ErrorAt("train:\n  steps: 5\n", {"trian.steps=5"}),
            "--set trian.steps=5: trian: unknown key (did you mean \"train\"?)");
  EXPECT_EQ(ErrorAt("train:\n  steps: 5\n", {"model={num_layerz: 3}"}),
            "--set model={num_layerz: 3}: model.num_layerz: unknown key (did you mean "
            "\"num_layers\"?)");
}

TEST(ConfigOverride, BadValueIsReportedAtTheOverride) {
  EXPECT_EQ(ErrorAt("train:\n  steps: 5\n", {"train.steps=abc"}),
            "--set train.steps=abc: train.steps: expected an integer, got \"abc\"");
  EXPECT_EQ(ErrorAt("", {"train.steps=5"}).substr(0, 19), "F: config is empty ");
  EXPECT_EQ(ErrorAt("model: {}\n", {"model.num_heads=0"}),
            "--set model.num_heads=0: model.num_heads: must be >= 1, got 0");
  EXPECT_EQ(ErrorAt("model: {}\n", {"model.family=gtp2"}),
            "--set model.family=gtp2: model.family: expected one of gpt2 | llama, got \"gtp2\" "
            "(did you mean \"gpt2\"?)");
  // Cross-field errors point at the override when it set the key.
  EXPECT_EQ(ErrorAt("model: {hidden_size: 64}\n", {"model.num_heads=3"}),
            "--set model.num_heads=3: model.num_heads: num_heads=3 does not divide "
            "hidden_size=64");
}

TEST(ConfigOverride, MalformedOverrides) {
  EXPECT_EQ(ErrorAt("train: {}\n", {"train.steps"}),
            "--set train.steps: expected key.path=value (missing '=')");
  EXPECT_STARTS_WITH(ErrorAt("train: {}\n", {"train..steps=5"}),
      "--set train..steps=5: malformed key path \"train..steps\"");
  EXPECT_STARTS_WITH(ErrorAt("train: {}\n", {"=5"}), "--set =5: malformed key path");
  EXPECT_STARTS_WITH(ErrorAt("train: {}\n", {"train.steps=[1,"}),
      "--set train.steps=[1,: train.steps: malformed value: ");
  EXPECT_EQ(ErrorAt("model: {family: gpt2}\n", {"model.family.x=1"}),
            "--set model.family.x=1: model.family: is \"gpt2\", not a map, so it has no key \"x\"");
}

// ---- resolved_yaml ----------------------------------------------------------------------------

TEST(ConfigResolved, RoundTripsEveryNonDefaultValue) {
  // Every key differs from its default, so a key the emitter forgot would show up.
  const std::string text =
      "model: {family: llama, vocab_size: 300, max_seq_len: 96, num_layers: 3, hidden_size: 48,\n"
      "        num_heads: 6, num_kv_heads: 3, ffn_hidden_size: 130, norm_eps: 1.0e-6,\n"
      "        rope_theta: 500000, tie_embeddings: true, init_std: 0.0125, recompute: selective}\n"
      "optimizer: {lr: 3.0e-4, beta1: 0.85, beta2: 0.999, eps: 1.0e-7, weight_decay: 0.05,\n"
      "            decay_norms: true, decay_biases: true, decay_embeddings: true, grad_clip: 0.7,\n"
      "            offload: cpu}\n"
      "parallel: {dp: 4, zero: 2}\n"
      "comm: {timeout_s: 12.5, bucket_mb: 0.25}\n"
      "schedule: {warmup_steps: 11, decay: linear, min_lr_ratio: 0.033, decay_steps: 150}\n"
      "data: {source: shards, train: \"null\", val: '123',\n"
      "       synthetic: {branching: 5, order: 2, concentration: 0.3, seed: 18446744073709551615,\n"
      "                   num_tokens: 5000}}\n"
      "train: {steps: 200, micro_batch_size: 3, grad_accum_steps: 4, seq_len: 80, seed: 77,\n"
      "        log_interval: 7, eval_interval: 50, eval_batches: 2, threads: 3, out_dir: 'a b/c',\n"
      "        peak_gflops: 123.25, on_nonfinite: skip, max_nonfinite_skips: 3, spike_zscore: 4.5,\n"
      "        spike_window: 16, spike_action: skip}\n"
      "init_from: \"~\"\n";
  const Config first = LoadOk(text);
  EXPECT_EQ(first.data.train_path, "null");
  EXPECT_EQ(first.init_from, "~");
  const std::string resolved_path = WriteTemp(first.resolved_yaml, "_resolved");
  Result<Config> second = LoadConfig(resolved_path);
  ASSERT_TRUE(second.ok()) << second.status().message() << "\n" << first.resolved_yaml;
  ExpectSameConfig(first, *second);
}

// The resolved config written with a run (config.yaml, the manifest's config_yaml) must read
// back to exactly the values the run used, also at the edges of what a 32-bit float holds:
// the largest finite float, the smallest normal one, values that need all 9 digits, and
// decimal strings that round to a float from either side.
TEST(ConfigResolved, EdgeFloatsReadBackBitForBit) {
  const char* values[] = {"3.4028234663852886e38", "3.40282347e+38", "1.17549435e-38",
                          "0.1", "0.30000001", "16777217", "123456789", "1.0000001",
                          "2.7182818284590452", "9.99999944e-39", "65504"};
  for (const char* v : values) {
    SCOPED_TRACE(v);
    const std::string text = std::string("comm: {timeout_s: ") + v + "}\ntrain: {peak_gflops: " +
                             v + "}\nmodel: {rope_theta: " + v + "}\n";
    Result<Config> first = LoadConfigFromText(text, "F");
    if (!first.ok()) {  // a value refused as written is fine; it must say why
      EXPECT_EQ(first.status().code(), StatusCode::kInvalidArgument);
      continue;
    }
    Result<Config> second = LoadConfigFromText(first->resolved_yaml, "F");
    ASSERT_TRUE(second.ok()) << second.status().message() << "\n" << first->resolved_yaml;
    ExpectSameConfig(*first, *second);
    EXPECT_EQ(second->resolved_yaml, first->resolved_yaml);
  }
}

TEST(ConfigResolved, RecordsOverridesAndDefaults) {
  // A 5-step smoke run of tiny.yaml must shorten the warmup too (warmup_steps <= steps).
  Result<Config> c =
      LoadConfig(Shipped("tiny.yaml"), {"train.steps=5", "schedule.warmup_steps=0"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_CONTAINS(c->resolved_yaml, "# --set train.steps=5\n# --set schedule.warmup_steps=0\n");
  EXPECT_CONTAINS(c->resolved_yaml, "steps: 5\n");
  EXPECT_CONTAINS(c->resolved_yaml, "lr: 0.003\n");           // shortest exact float
  EXPECT_CONTAINS(c->resolved_yaml, "rope_theta: 10000.0\n");  // a default, written out
  EXPECT_CONTAINS(c->resolved_yaml, "init_from: \"\"");
  Result<Config> again = LoadConfig(WriteTemp(c->resolved_yaml));
  ASSERT_TRUE(again.ok()) << again.status().message();
  ExpectSameConfig(*c, *again);
}

// ---- suggestion helper ------------------------------------------------------------------------

TEST(ConfigResolved, FloatsAreShortExactAndYaml11Friendly) {
  EXPECT_EQ(FormatYamlFloat(3e-3f), "0.003");
  EXPECT_EQ(FormatYamlFloat(0.1f), "0.1");
  EXPECT_EQ(FormatYamlFloat(1e-5f), "1.0e-05");
  EXPECT_EQ(FormatYamlFloat(2.5e-7f), "2.5e-07");
  EXPECT_EQ(FormatYamlFloat(10000.0f), "10000.0");
  EXPECT_EQ(FormatYamlFloat(0.0f), "0.0");
  EXPECT_EQ(FormatYamlFloat(1e10f), "1.0e+10");
  for (float v : {0.1f, 1.0f / 3.0f, 6e-4f, 0.95f, 1e-8f, 123456.7f, 3.4e38f}) {
    EXPECT_EQ(std::strtof(FormatYamlFloat(v).c_str(), nullptr), v) << v;
  }
}

// ---- parallel, comm, optimizer.offload ----------------------------------------------------------

TEST(ConfigTrainPeak, PeakGflopsIsGivenOrMeasured) {
  EXPECT_EQ(LoadOk("train: {}\n").train.peak_gflops, 0.0f);  // 0: measure sgemm
  EXPECT_EQ(LoadOk("train: {peak_gflops: 989000}\n").train.peak_gflops, 989000.0f);
  EXPECT_STARTS_WITH(ErrorAt("train: {peak_gflops: -1}\n"), "F:1:22: train.peak_gflops: ");
}

TEST(ConfigParallel, DefaultsAreOneRankNoZero) {
  const Config c = LoadOk("train: {steps: 1}\n");
  EXPECT_EQ(c.parallel.dp, 1);
  EXPECT_EQ(c.parallel.tp, 1);
  EXPECT_EQ(c.parallel.pp, 1);
  EXPECT_EQ(c.parallel.ep, 1);
  EXPECT_EQ(c.parallel.zero, 0);
  EXPECT_EQ(c.parallel.world_size(), 1);
  EXPECT_EQ(c.comm.timeout_s, 300.0f);
  EXPECT_EQ(c.comm.bucket_mb, 25.0f);
  EXPECT_EQ(c.optimizer.offload, OptimizerOffload::kNone);
}

TEST(ConfigParallel, ReadsDpZeroCommAndOffload) {
  const Config c = LoadOk("parallel: {dp: 4, zero: 2}\ncomm: {timeout_s: 30, bucket_mb: 0.5}\n",
                          {"optimizer.offload=cpu"});
  EXPECT_EQ(c.parallel.dp, 4);
  EXPECT_EQ(c.parallel.zero, 2);
  EXPECT_EQ(c.parallel.world_size(), 4);
  EXPECT_EQ(c.comm.timeout_s, 30.0f);
  EXPECT_EQ(c.comm.bucket_mb, 0.5f);
  EXPECT_EQ(c.optimizer.offload, OptimizerOffload::kCpu);
}

TEST(ConfigParallel, NvmeOffloadNeedsItsDirectoryOutsideTheCheckpoints) {
  const Config c = LoadOk("optimizer: {offload: nvme, offload_dir: /scratch/opt, offload_buffer_mb: 16}\n");
  EXPECT_EQ(c.optimizer.offload, OptimizerOffload::kNvme);
  EXPECT_EQ(c.optimizer.offload_dir, "/scratch/opt");
  EXPECT_EQ(c.optimizer.offload_buffer_mb, 16);
  EXPECT_EQ(LoadOk("train: {steps: 1}\n").optimizer.offload_buffer_mb, 64);
  EXPECT_STARTS_WITH(ErrorAt("optimizer: {offload: nvme}\n"),
                     "F:1:22: optimizer.offload: offload=nvme needs offload_dir");
  EXPECT_STARTS_WITH(ErrorAt("optimizer: {offload: cpu, offload_dir: /x}\n"),
                     "F:1:40: optimizer.offload_dir: offload_dir is set but offload=cpu");
  EXPECT_STARTS_WITH(ErrorAt("checkpoint: {dir: /ck}\noptimizer: {offload: nvme, offload_dir: /ck/opt}\n"),
                     "F:2:41: optimizer.offload_dir: offload_dir=/ck/opt is inside checkpoint.dir=/ck");
  EXPECT_STARTS_WITH(
      ErrorAt("checkpoint: {dir: /ck, memory_interval_steps: 5}\n"
              "optimizer: {offload: nvme, offload_dir: /dev/shm/tessera/opt}\n"),
      "F:2:41: optimizer.offload_dir: offload_dir=/dev/shm/tessera/opt is inside "
      "checkpoint.memory_dir=/dev/shm/tessera");
  // Without the memory tier, its default root is nobody's tree.
  LoadOk("checkpoint: {dir: /ck}\noptimizer: {offload: nvme, offload_dir: /dev/shm/tessera/opt}\n");
  EXPECT_STARTS_WITH(ErrorAt("optimizer: {offload: nvme, offload_dir: /x, offload_buffer_mb: 0}\n"),
                     "F:1:64: optimizer.offload_buffer_mb: ");
  // Round trip through the resolved config.
  const Config again = LoadOk(c.resolved_yaml);
  EXPECT_EQ(again.optimizer.offload_dir, "/scratch/opt");
  EXPECT_EQ(again.optimizer.offload_buffer_mb, 16);
}

TEST(ConfigParallel, TensorParallelSplitsAreChecked) {
  const Config ok = LoadOk("parallel:\n  tp: 2\n  sequence_parallel: true\n");
  EXPECT_EQ(ok.parallel.tp, 2);
  EXPECT_TRUE(ok.parallel.sequence_parallel);
  EXPECT_EQ(ok.parallel.world_size(), 2);
  // The default model has 4 heads: 3 ranks cannot split them.
  EXPECT_STARTS_WITH(ErrorAt("parallel:\n  tp: 3\n"), "F:2:7: parallel.tp: parallel.tp=3 does not divide model.num_heads=4");
  // 8 x 64 tokens per micro-batch do not divide among... only a tp that also splits the
  // heads can get there: 4 heads, tp 4, 3 x 7 = 21 tokens.
  EXPECT_STARTS_WITH(
      ErrorAt("parallel: {tp: 4, sequence_parallel: true}\ntrain: {micro_batch_size: 3, seq_len: 7}\n"),
      "F:1:38: parallel.sequence_parallel: sequence parallelism splits each micro-batch's "
      "micro_batch_size x seq_len = 21 tokens among tp=4 ranks");
}

TEST(ConfigParallel, PipelineLayoutsAreChecked) {
  const Config ok = LoadOk(
      "model: {num_layers: 4}\nparallel: {pp: 2, pipeline_schedule: interleaved, "
      "virtual_stages: 2}\ntrain: {grad_accum_steps: 4}\n");
  EXPECT_EQ(ok.parallel.pp, 2);
  EXPECT_EQ(ok.parallel.pipeline_schedule, PipelineSchedule::kInterleaved);
  EXPECT_EQ(ok.parallel.virtual_stages, 2);
  // The default model has 2 layers: 4 stages cannot hold one each.
  EXPECT_STARTS_WITH(ErrorAt("parallel: {pp: 4}\ntrain: {grad_accum_steps: 4}\n"),
                     "F:1:16: parallel.pp: model.num_layers=2 does not divide evenly "
                     "into 4 pipeline stages");
  // 3 layers on 2 stages: the error suggests a split; the split works.
  EXPECT_NE(ErrorAt("model: {num_layers: 3}\nparallel: {pp: 2}\ntrain: {grad_accum_steps: 2}\n")
                .find("set parallel.pipeline_split, e.g. [2, 1]"),
            std::string::npos);
  EXPECT_EQ(LoadOk("model: {num_layers: 3}\nparallel: {pp: 2, pipeline_split: [1, 2]}\n"
                   "train: {grad_accum_steps: 2}\n")
                .parallel.pipeline_split,
            (std::vector<int64_t>{1, 2}));
  // 1F1B needs at least pp micro-batches per step.
  EXPECT_NE(ErrorAt("parallel: {pp: 2}\n").find("train.grad_accum_steps"), std::string::npos)
      << ErrorAt("parallel: {pp: 2}\n");
  EXPECT_EQ(LoadOk("model: {num_layers: 6}\nparallel: {pp: 4, account_for_embedding_and_head: "
                   "true}\ntrain: {grad_accum_steps: 4}\n")
                .parallel.account_for_embedding_and_head,
            true);
  EXPECT_NE(ErrorAt("model: {num_layers: 5}\nparallel: {pp: 2, account_for_embedding_and_head: "
                    "true}\ntrain: {grad_accum_steps: 2}\n")
                .find("7 units"),
            std::string::npos);
  EXPECT_NE(ErrorAt("parallel: {virtual_stages: 2}\n").find("virtual_stages=2 interleaves"),
            std::string::npos);
  EXPECT_NE(ErrorAt("parallel: {pp: 2, pipeline_split: [1, x]}\ntrain: {grad_accum_steps: 2}\n")
                .find("expected a list of integers"),
            std::string::npos);
}

TEST(ConfigParallel, ExpertParallelismWithoutExpertsIsANamedError) {
  EXPECT_STARTS_WITH(ErrorAt("train: {}\n", {"parallel.ep=2"}),
                     "--set parallel.ep=2: parallel.ep: ep=2 splits experts, but the model has none");
  EXPECT_EQ(LoadOk("parallel:\n  dp: 4\n  zero: 3\n").parallel.zero, 3);
}

TEST(ConfigParallel, ZeroThreeWithOneRankIsAnError) {
  EXPECT_EQ(ErrorAt("parallel:\n  zero: 3\n"),
            "F:2:9: parallel.zero: zero=3 partitions the parameters across the data-parallel "
            "ranks, but dp=1: with one rank there is nothing to partition (use zero 0, or set "
            "parallel.dp and launch that many ranks)");
}

TEST(ConfigPrecision, ReadsPrecisionAndMixedPrecision) {
  const Config d = LoadOk("train: {}\n");
  EXPECT_EQ(d.precision, Precision::kFp32);
  EXPECT_FALSE(d.mixed_precision.reduce_in_low);
  EXPECT_EQ(d.mixed_precision.loss_scale, LossScaleMode::kDynamic);
  EXPECT_EQ(d.mixed_precision.initial_scale, 65536.0f);
  const Config c = LoadOk(
      "precision: fp16\nmixed_precision: {reduce_dtype: low, loss_scale: static, "
      "initial_scale: 1024, growth_interval: 50, min_scale: 2}\n");
  EXPECT_EQ(c.precision, Precision::kFp16);
  EXPECT_EQ(PrecisionDType(c.precision), DType::kF16);
  EXPECT_TRUE(c.mixed_precision.reduce_in_low);
  EXPECT_EQ(c.mixed_precision.loss_scale, LossScaleMode::kStatic);
  EXPECT_EQ(c.mixed_precision.initial_scale, 1024.0f);
  EXPECT_EQ(c.mixed_precision.growth_interval, 50);
  EXPECT_EQ(c.mixed_precision.min_scale, 2.0f);
  EXPECT_EQ(LoadOk("train: {}\n", {"precision=bf16"}).precision, Precision::kBf16);
}

TEST(ConfigCheckpoint, ReadsCheckpointResumeAndInitKeys) {
  const Config d = LoadOk("train: {}\n");
  EXPECT_TRUE(d.checkpoint.dir.empty());
  EXPECT_EQ(d.resume, ResumeMode::kNone);
  EXPECT_TRUE(d.checkpoint.async);
  const Config c = LoadOk(
      "checkpoint: {dir: /tmp/ck, interval_steps: 50, at_end: false, keep_last: 2, keep_every: "
      "1000, async: false, on_busy: skip, max_failures: 5}\nresume: auto\n"
      "init_from: /tmp/ck\ninit_optimizer: true\n");
  EXPECT_EQ(c.checkpoint.dir, "/tmp/ck");
  EXPECT_EQ(c.checkpoint.interval_steps, 50);
  EXPECT_FALSE(c.checkpoint.at_end);
  EXPECT_EQ(c.checkpoint.keep_last, 2);
  EXPECT_EQ(c.checkpoint.keep_every, 1000);
  EXPECT_FALSE(c.checkpoint.async);
  EXPECT_EQ(c.checkpoint.on_busy, CheckpointOnBusy::kSkip);
  EXPECT_EQ(c.checkpoint.max_failures, 5);
  EXPECT_EQ(c.resume, ResumeMode::kAuto);
  EXPECT_TRUE(c.init_optimizer);
}

TEST(ConfigCheckpoint, BadValuesAreNamed) {
  EXPECT_EQ(ErrorAt("resume: auto\n"),
            "F:1:9: resume: resume=auto needs checkpoint.dir (where to look for checkpoints)");
  EXPECT_EQ(ErrorAt("checkpoint: {keep_last: 0}\n"),
            "F:1:25: checkpoint.keep_last: must be >= 1, got 0");
  EXPECT_STARTS_WITH(ErrorAt("checkpoint: {on_busy: later}\n"), "F:1:23: checkpoint.on_busy:");
  EXPECT_EQ(ErrorAt("init_optimizer: true\n"),
            "F:1:17: init_optimizer: init_optimizer=true needs init_from (a checkpoint to take the "
            "optimizer state from)");
  EXPECT_EQ(ErrorAt("checkpoint: {intervall_steps: 5}\n"),
            "F:1:14: checkpoint.intervall_steps: unknown key (did you mean \"interval_steps\"?)");
  // The memory tier: behind a disk tier, in an absolute directory.
  EXPECT_STARTS_WITH(ErrorAt("checkpoint: {memory_interval_steps: 5}\n"),
                     "F:1:37: checkpoint.memory_interval_steps: the memory tier needs checkpoint.dir");
  EXPECT_STARTS_WITH(ErrorAt("checkpoint: {memory_interval: auto}\n"),
                     "F:1:31: checkpoint.memory_interval: the memory tier needs checkpoint.dir");
  EXPECT_STARTS_WITH(ErrorAt("checkpoint: {dir: /ck, memory_interval_steps: 5, memory_dir: shm}\n"),
                     "F:1:62: checkpoint.memory_dir: checkpoint.memory_dir must be an absolute path");
  EXPECT_EQ(ErrorAt("checkpoint: {memory_keep: 0}\n"), "F:1:27: checkpoint.memory_keep: must be >= 1, got 0");
  const Config c = LoadOk("checkpoint: {dir: /ck, memory_interval_steps: 5}\n");
  EXPECT_EQ(c.checkpoint.memory_interval_steps, 5);
  EXPECT_EQ(c.checkpoint.memory_dir, "/dev/shm/tessera");
  EXPECT_EQ(c.checkpoint.memory_keep, 2);
}

TEST(ConfigPrecision, BadValuesAreNamed) {
  EXPECT_STARTS_WITH(ErrorAt("precision: fp8\n"), "F:1:12: precision:");
  EXPECT_STARTS_WITH(ErrorAt("mixed_precision: {reduce_dtype: f32}\n"),
                     "F:1:33: mixed_precision.reduce_dtype:");
  EXPECT_EQ(ErrorAt("mixed_precision: {growth_interval: 0}\n"),
            "F:1:36: mixed_precision.growth_interval: must be >= 1, got 0");
  EXPECT_EQ(ErrorAt("precision: fp16\nmixed_precision: {min_scale: 8, initial_scale: 4}\n"),
            "F:2:30: mixed_precision.min_scale: min_scale=8.0 exceeds initial_scale=4.0");
  EXPECT_EQ(LoadOk("mixed_precision: {min_scale: 8, initial_scale: 4}\n").mixed_precision.min_scale,
            8.0f);  // unused unless fp16 with dynamic scaling
  EXPECT_EQ(ErrorAt("precision: fp16\nmixed_precision:\n  initial_scale: 1000\n"),
            "F:3:18: mixed_precision.initial_scale: initial_scale=1000.0 must be a power of two "
            "(e.g. 65536), so that removing the scale from the gradients is exact");
  EXPECT_STARTS_WITH(ErrorAt("mixed_precision: {min_scale: 0.3}\n"),
                     "F:1:30: mixed_precision.min_scale: min_scale=0.3 must be a power of two");
  EXPECT_EQ(LoadOk("mixed_precision: {min_scale: 0.25}\n").mixed_precision.min_scale, 0.25f);
  EXPECT_EQ(ErrorAt("mixed_precision: {loss_scal: static}\n"),
            "F:1:19: mixed_precision.loss_scal: unknown key (did you mean \"loss_scale\"?)");
}

TEST(ConfigParallel, RangeTypoAndUnknownKeyErrors) {
  EXPECT_EQ(ErrorAt("parallel: {zero: 4}\n"), "F:1:18: parallel.zero: must be <= 3, got 4");
  EXPECT_EQ(ErrorAt("parallel: {dp: 0}\n"), "F:1:16: parallel.dp: must be >= 1, got 0");
  EXPECT_EQ(ErrorAt("parallel: {dpp: 2}\n"), "F:1:12: parallel.dpp: unknown key (did you mean \"dp\"?)");
  EXPECT_EQ(ErrorAt("comm: {timeout_s: 0}\n"), "F:1:19: comm.timeout_s: must be > 0, got 0");
  EXPECT_EQ(ErrorAt("comm: {bucket_mbs: 1}\n"),
            "F:1:8: comm.bucket_mbs: unknown key (did you mean \"bucket_mb\"?)");
  EXPECT_EQ(ErrorAt("optimizer: {offload: cpuu}\n"),
            "F:1:22: optimizer.offload: expected one of none | cpu | nvme, got \"cpuu\" (did you mean \"cpu\"?)");
}

TEST(ConfigSuggest, EditDistanceAndThreshold) {
  EXPECT_EQ(EditDistance("keep_lats", "keep_last"), 1);
  EXPECT_EQ(EditDistance("num_layer", "num_layers"), 1);
  EXPECT_EQ(EditDistance("LR", "lr"), 0);
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_EQ(ClosestWord("keep_lats", {"keep_every", "keep_last"}), "keep_last");
  EXPECT_EQ(ClosestWord("banana", {"steps", "seed"}), "");
  EXPECT_EQ(ClosestWord("x", {"lr"}), "");  // a total rewrite is not a suggestion
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(ConfigCrossField, SyntheticChainLimitsAreConfigErrors) {
  const std::string error =
      ErrorAt("model:\n  vocab_size: 8192\ndata:\n  synthetic:\n    order: 2\n");
  EXPECT_NE(error.find("F:5:12: data.synthetic.order"), std::string::npos) << error;
  EXPECT_NE(error.find("needs vocab_size <= 4096"), std::string::npos) << error;
}

}  // namespace
}  // namespace tessera
