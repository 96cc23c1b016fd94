// The CUDA replica's general model (cuda/net.h) against the CPU's (cpu/net.h) on the same
// weights and batches: the summed loss, every parameter's gradient (also accumulated over a
// second micro-batch), batch norm's running statistics and evaluation, for a residual CNN with
// batch norm, max pooling, dropout and a hidden layer, and for a plain one with biased
// convolutions, average pooling, tanh, a global average and label smoothing. Exact fp32 (no
// TF32), so the two differ by summation order alone (bounds 1e-5); bf16 and fp16 against the
// CPU's emulation of them. Skipped where no CUDA device
// is present (label `gpu`); the emulator runs the same file on every machine (`emu.` tests).
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/net.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_buffer.h"
#include "cuda/net.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "model.h"
#include "nlohmann/json.hpp"
#include "test_util.h"
#include "trainer/trainer.h"

namespace sweep::trainer::cuda {
namespace {

using test::Count;
using test::Down;
using test::ExpectErr;
using test::NormErr;
using test::Up;
using testing::Random;

// Counts the layers Backward reports, to check they come last to first.
class RecordingHook final : public LayerHook {
 public:
  Status LayerDone(int layer) override {
    order.push_back(layer);
    return Status::Ok();
  }
  std::vector<int> order;
};

class CudaNet : public ::testing::Test {
 protected:
  void SetUp() override {
    const Result<int> devices = DeviceCount();
    if (!devices.ok()) GTEST_SKIP() << devices.status().message();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_TRUE(CreateBlasHandle(stream_, /*tf32=*/false, &blas_).ok());
    const Status s = CreateCudnnHandle(stream_, &dnn_);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  void TearDown() override {
    if (dnn_ != nullptr) cudnnDestroy(dnn_);
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // bound: of the loss, gradients and statistics (exact fp32: summation order alone).
  // cudnn_batch_norms: whether every batch norm layer should run through cuDNN (kAll), some but
  // not all (kSome), or none (kNone); kUnchecked: not checked.
  void Compare(const TrainOptions& o, TensorShape input, float smoothing,
               Precision precision = Precision::kFp32, double bound = 1e-5,
               int cudnn_batch_norms = kUnchecked) {
    Result<ModelSpec> built = BuildModel(o, input, 5);
    ASSERT_TRUE(built.ok()) << built.status().message();
    const ModelSpec& model = built.value();
    const int B = 6;
    cpu::Net cpu(model, B, precision, smoothing);
    Result<std::unique_ptr<Net>> made =
        Net::Create(model, B, precision, smoothing, /*tf32=*/false, stream_, blas_, dnn_);
    ASSERT_TRUE(made.ok()) << made.status().message();
    Net& gpu = *made.value();
    if (cudnn_batch_norms != kUnchecked) {
      EXPECT_GT(gpu.batch_norms(), 0);
      if (cudnn_batch_norms == kAll) {
        EXPECT_EQ(gpu.batch_norms_through_cudnn(), gpu.batch_norms()) << gpu.batch_norm_note();
      } else if (cudnn_batch_norms == kNone) {
        EXPECT_EQ(gpu.batch_norms_through_cudnn(), 0);
      } else {
        EXPECT_GT(gpu.batch_norms_through_cudnn(), 0);
        EXPECT_LT(gpu.batch_norms_through_cudnn(), gpu.batch_norms());
      }
      std::printf("  batch norms through cuDNN: %d of %d%s%s\n", gpu.batch_norms_through_cudnn(),
                  gpu.batch_norms(), gpu.batch_norm_note().empty() ? "" : "; ",
                  gpu.batch_norm_note().c_str());
    }
    InitParams(model, 3, cpu.params(), cpu.stats());
    const size_t np = Count(model.num_params), ns = Count(model.num_buffers);
    ASSERT_EQ(cudaMemcpy(gpu.params(), cpu.params(), np * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);

    DeviceBuffer<float> x;
    DeviceBuffer<int32_t> y;
    ASSERT_TRUE(DeviceBuffer<float>::Make(B * input.size(), &x).ok());
    ASSERT_TRUE(DeviceBuffer<int32_t>::Make(B, &y).ok());
    // Copies from pageable memory land in the legacy stream's order, which stream_ does not
    // wait for: each upload is waited for before the net reads it.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    RecordingHook hook;
    for (int mb = 0; mb < 2; ++mb) {  // the second micro-batch accumulates
      const std::vector<float> xs = Random(Count(B * input.size()), 10 + mb, 1.5);
      std::vector<int32_t> ys;
      for (int b = 0; b < B; ++b) ys.push_back((b + mb) % 5);
      ASSERT_EQ(cudaMemcpy(x.data(), xs.data(), xs.size() * sizeof(float), cudaMemcpyHostToDevice),
                cudaSuccess);
      ASSERT_EQ(
          cudaMemcpy(y.data(), ys.data(), ys.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
          cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const double loss = cpu.ForwardLoss(xs.data(), ys.data(), B, 1.0f / B, 77, mb * B);
      cpu.Backward(xs.data(), B, mb > 0);
      ASSERT_TRUE(gpu.ForwardLossOn(x.data(), y.data(), B, 1.0f / B, 77, mb * B, false).ok());
      hook.order.clear();
      ASSERT_TRUE(gpu.BackwardOn(x.data(), B, mb > 0, &hook).ok());
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      double gpu_loss = 0;
      ASSERT_EQ(cudaMemcpy(&gpu_loss, gpu.summed_loss(), sizeof(double), cudaMemcpyDeviceToHost),
                cudaSuccess);
      const std::string at = std::string(precision == Precision::kFp32   ? " fp32"
                                         : precision == Precision::kBf16 ? " bf16"
                                                                         : " fp16") +
                             " (micro-batch " + std::to_string(mb) + ")";
      ExpectErr(("loss" + at).c_str(), std::abs(gpu_loss - loss) / std::abs(loss), bound);
      std::vector<float> grads(np), stats(ns);
      ASSERT_EQ(cudaMemcpy(grads.data(), gpu.grads(), np * sizeof(float), cudaMemcpyDeviceToHost),
                cudaSuccess);
      ExpectErr(("gradients" + at).c_str(),
                NormErr(grads, std::vector<float>(cpu.grads(), cpu.grads() + np)), bound);
      ASSERT_EQ(cudaMemcpy(stats.data(), gpu.stats(), ns * sizeof(float), cudaMemcpyDeviceToHost),
                cudaSuccess);
      if (ns > 0) {
        ExpectErr(("running statistics" + at).c_str(),
                  NormErr(stats, std::vector<float>(cpu.stats(), cpu.stats() + ns)), bound);
      }
    }
    std::vector<int> expected;
    for (int k = static_cast<int>(model.param_layers.size()) - 1; k >= 0; --k) {
      expected.push_back(k);
    }
    EXPECT_EQ(hook.order, expected);

    // Evaluation, with the running statistics both updated.
    const std::vector<float> xs = Random(Count(B * input.size()), 30, 1.5);
    std::vector<int32_t> ys;
    for (int b = 0; b < B; ++b) ys.push_back(b % 5);
    double cpu_loss = 0;
    int64_t cpu_correct = 0;
    cpu.Evaluate(xs.data(), ys.data(), B, &cpu_loss, &cpu_correct);
    DeviceBuffer<float> ex = Up(xs);
    DeviceBuffer<int32_t> ey = Up(ys);
    DeviceBuffer<double> total = Up(std::vector<double>{0.0});
    DeviceBuffer<unsigned long long> correct = Up(std::vector<unsigned long long>{0});
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE(gpu.EvaluateOn(ex.data(), ey.data(), B, total.data(), correct.data()).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ExpectErr("evaluation loss", std::abs(Down(total)[0] - cpu_loss) / std::abs(cpu_loss), bound);
    if (precision == Precision::kFp32) {
      EXPECT_EQ(static_cast<int64_t>(Down(correct)[0]), cpu_correct);
    }
  }

  static constexpr int kUnchecked = -1, kSome = 0, kAll = 1, kNone = 2;

  // The fused passes against every pass apart, both through our batch norm (Train): the same
  // bits.
  void ExpectSameBits(const ModelSpec& model, TensorShape input, Precision precision, int rows) {
    NetOptions fused, unfused;
    fused.ours_norm_only = unfused.ours_norm_only = true;
    unfused.fuse = false;
    const Run a = Train(model, input, precision, fused, rows);
    const Run b = Train(model, input, precision, unfused, rows);
    ASSERT_EQ(a.losses.size(), 2u);
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_EQ(a.grads, b.grads);
    EXPECT_EQ(a.stats, b.stats);
    EXPECT_EQ(a.eval_loss, b.eval_loss);
    EXPECT_EQ(a.correct, b.correct);
  }

  // What a net of 6 rows gives for two micro-batches of B rows (the second accumulating) and an
  // evaluation: the losses, the gradients, the running statistics and the evaluation's loss and
  // count, as bits.
  struct Run {
    std::vector<double> losses;
    std::vector<float> grads, stats;
    double eval_loss = 0;
    unsigned long long correct = 0;
  };
  Run Train(const ModelSpec& model, TensorShape input, Precision precision,
            const NetOptions& options, int B) {
    Run run;
    Result<std::unique_ptr<Net>> made =
        Net::Create(model, 6, precision, 0.0f, /*tf32=*/false, stream_, blas_, dnn_, options);
    EXPECT_TRUE(made.ok()) << made.status().message();
    if (!made.ok()) return run;
    Net& gpu = *made.value();
    std::vector<float> params(Count(model.num_params)), stats(Count(model.num_buffers));
    InitParams(model, 3, params.data(), stats.data());
    EXPECT_EQ(cudaMemcpy(gpu.params(), params.data(), params.size() * sizeof(float),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    for (int mb = 0; mb < 3; ++mb) {  // two micro-batches, then an evaluation
      DeviceBuffer<float> x = Up(Random(Count(B * input.size()), 10 + mb, 1.5));
      std::vector<int32_t> ys;
      for (int b = 0; b < B; ++b) ys.push_back((b + mb) % 5);
      DeviceBuffer<int32_t> y = Up(ys);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      if (mb == 2) {
        DeviceBuffer<double> total = Up(std::vector<double>{0.0});
        DeviceBuffer<unsigned long long> correct = Up(std::vector<unsigned long long>{0});
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_TRUE(gpu.EvaluateOn(x.data(), y.data(), B, total.data(), correct.data()).ok());
        EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        run.eval_loss = Down(total)[0];
        run.correct = Down(correct)[0];
        break;
      }
      EXPECT_TRUE(gpu.ForwardLossOn(x.data(), y.data(), B, 1.0f / B, 77, mb * B, false).ok());
      EXPECT_TRUE(gpu.BackwardOn(x.data(), B, mb > 0, nullptr).ok());
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      double loss = 0;
      EXPECT_EQ(cudaMemcpy(&loss, gpu.summed_loss(), sizeof loss, cudaMemcpyDeviceToHost),
                cudaSuccess);
      run.losses.push_back(loss);
    }
    run.grads.resize(params.size());
    run.stats.resize(stats.size());
    EXPECT_EQ(cudaMemcpy(run.grads.data(), gpu.grads(), run.grads.size() * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    if (!run.stats.empty()) {
      EXPECT_EQ(cudaMemcpy(run.stats.data(), gpu.stats(), run.stats.size() * sizeof(float),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return run;
  }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
};

TEST_F(CudaNet, AResidualCnnMatchesTheCpu) {
  TrainOptions o;
  o.model = "cnn";
  o.channels = {4, 8};
  o.residual = true;
  o.hidden = {16};
  o.dropout = 0.25;
  Compare(o, TensorShape{2, 8, 8}, 0.0f);
}

// Batch norm's training pass and backward run through cuDNN where it has an engine (fp32 wants
// channels in fours), and through our kernels where it has none, in one net; both match the
// CPU.
TEST_F(CudaNet, BatchNormRunsThroughCudnnWhereItHasAnEngine) {
  TrainOptions o;
  o.model = "cnn";
  o.channels = {8, 16};
  o.hidden = {};
  Compare(o, TensorShape{3, 6, 6}, 0.0f, Precision::kFp32, 1e-5, kAll);
  // cuDNN's batch-norm engines take fp32 channels in fours: 12, not 30. The widest layer
  // (30) sets the net's scratch for cuDNN's gradients, which must stay 16-byte aligned.
  o.channels = {12, 30};
  o.residual = true;
  Compare(o, TensorShape{3, 6, 6}, 0.0f, Precision::kFp32, 1e-5, kSome);
  // None through cuDNN: our kernels apply each stage's first ReLU in batch norm's passes.
  o.channels = {6, 10};
  o.residual = false;
  Compare(o, TensorShape{3, 6, 6}, 0.0f, Precision::kFp32, 1e-5, kNone);
  // bf16: the next convolution's 16-bit input is read from the fused output. 0.021 of this
  // net's gradients is bf16's own rounding: the same without the fusion.
  Compare(o, TensorShape{3, 6, 6}, 0.0f, Precision::kBf16, 0.03, kNone);
}

TEST_F(CudaNet, APlainCnnWithBiasesMatchesTheCpu) {
  TrainOptions o;
  o.model = "cnn";
  o.channels = {3, 6};
  o.batch_norm = false;
  o.pool = "avg";
  o.global_pool = true;
  o.activation = "tanh";
  o.hidden = {};
  Compare(o, TensorShape{1, 9, 9}, 0.1f);
}

// bf16 / fp16: the GEMMs read 16-bit weights, inputs and output gradients on both sides; the
// GPU's convolutions also round their outputs and gradients to 16 bits (the CPU's stay fp32).
// fp16 (2^-12 relative) on the residual CNN; bf16 (2^-9) on the plain one: batch norm's
// backward subtracts near-equal terms of its 16-bit input, which at bf16's precision and six
// samples moves the first layers' gradients by several percent, as it does in PyTorch's AMP.
TEST_F(CudaNet, HalfPrecisionMatchesTheCpusEmulation) {
  TrainOptions o;
  o.model = "cnn";
  o.channels = {4, 8};
  o.residual = true;
  o.hidden = {16};
  Compare(o, TensorShape{2, 8, 8}, 0.0f, Precision::kFp16, 5e-3);
  o.residual = false;
  o.batch_norm = false;
  o.pool = "avg";
  o.global_pool = true;
  o.hidden = {};
  Compare(o, TensorShape{1, 9, 9}, 0.1f, Precision::kBf16, 2e-2);
}

// The model's first convolution (one input channel here, three in the second case) runs our
// direct kernels (cuda/cnn_ops.h) and trains as cuDNN's does: the same losses, gradients,
// running statistics and evaluation within the precision's rounding; every other convolution
// stays cuDNN's.
TEST_F(CudaNet, TheFirstConvolutionRunsDirectlyAndTrainsAsCudnnsDoes) {
  TrainOptions o;
  o.model = "cnn";
  o.channels = {4, 8};
  o.hidden = {16};
  for (const TensorShape input : {TensorShape{1, 8, 8}, TensorShape{3, 7, 9}}) {
    Result<ModelSpec> model = BuildModel(o, input, 5);
    ASSERT_TRUE(model.ok()) << model.status().message();
    for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
      SCOPED_TRACE(std::to_string(input.c) + (precision == Precision::kFp32 ? " fp32" : " bf16"));
      NetOptions direct, cudnn;
      cudnn.direct_conv = false;
      for (const NetOptions& options : {direct, cudnn}) {
        Result<std::unique_ptr<Net>> net =
            Net::Create(*model, 6, precision, 0.0f,
                        /*tf32=*/false, stream_, blas_, dnn_, options);
        ASSERT_TRUE(net.ok()) << net.status().message();
        const std::string plans = (*net)->Describe();
        const std::string first =
            "layer 0 convolution: ours, direct (" +
            std::string(input.c == 1 ? "1 input channel)" : "3 input channels)");
        EXPECT_EQ(plans.find(first) != std::string::npos, options.direct_conv) << plans;
        EXPECT_EQ(plans.find("direct", plans.find('\n')), std::string::npos) << plans;
      }
      const Run a = Train(*model, input, precision, direct, 6);
      const Run b = Train(*model, input, precision, cudnn, 6);
      const double bound = precision == Precision::kFp32 ? 1e-5 : 2e-2;
      ASSERT_EQ(a.losses.size(), b.losses.size());
      for (size_t i = 0; i < a.losses.size(); ++i) {
        EXPECT_NEAR(a.losses[i], b.losses[i], bound * std::abs(b.losses[i])) << i;
      }
      ExpectErr("gradients", NormErr(a.grads, b.grads), bound);
      ExpectErr("running statistics", NormErr(a.stats, b.stats), bound);
      EXPECT_NEAR(a.eval_loss, b.eval_loss, bound * std::abs(b.eval_loss));
    }
  }
}

// Passes our kernels fuse give the bits of the unfused path (NetOptions::fuse): a max pool run
// inside the batch norm before it (every precision); in bf16 / fp16, our batch norm reading
// its convolution's 16-bit output, writing the next convolution's 16-bit input (its fp32
// output skipped, the ReLU's mask computed again in backward), reading that convolution's
// 16-bit data gradient and writing its own convolution's 16-bit output gradient, and the ReLUs
// doing the same; a pool writing the 16-bit input of the linear layer after its flatten.
TEST_F(CudaNet, FusedPassesGiveTheUnfusedBits) {
  struct Case {
    bool residual;
    TensorShape input;
    int rows;  // a full batch of 6, or a last partial one
  };
  TrainOptions o;
  o.model = "cnn";
  o.channels = {4, 8};
  o.hidden = {16};
  // 7x9: the pools leave a row and a column no window covers.
  for (const Case& k : {Case{false, {2, 8, 8}, 6}, Case{true, {2, 8, 8}, 6},
                        Case{false, {2, 7, 9}, 5}, Case{true, {2, 7, 9}, 5}}) {
    o.residual = k.residual;
    Result<ModelSpec> model = BuildModel(o, k.input, 5);
    ASSERT_TRUE(model.ok()) << model.status().message();
    for (const Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
      SCOPED_TRACE(std::string(k.residual ? "residual " : "plain ") + std::to_string(k.input.h) +
                   "x" + std::to_string(k.input.w) + ", " + std::to_string(k.rows) + " rows" +
                   (precision == Precision::kFp32   ? " fp32"
                    : precision == Precision::kBf16 ? " bf16"
                                                    : " fp16"));
      ExpectSameBits(*model, k.input, precision, k.rows);
    }
  }
  // A residual end whose shortcut batch norm reads the model's input.
  Result<ModelSpec> on_input = ModelSpec::FromJson(nlohmann::json::parse(R"({
      "input": [4, 6, 6], "classes": 5, "layers": [
        {"kind": "batch_norm", "input": -1},
        {"kind": "conv2d", "input": -1, "out": 4, "kernel": 3, "stride": 1, "pad": 1,
         "bias": false},
        {"kind": "batch_norm", "input": 1},
        {"kind": "add", "input": 2, "shortcut": 0},
        {"kind": "max_pool", "input": 3, "kernel": 2, "stride": 2},
        {"kind": "flatten", "input": 4},
        {"kind": "linear", "input": 5, "out": 5}]})"));
  ASSERT_TRUE(on_input.ok()) << on_input.status().message();
  for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
    SCOPED_TRACE(precision == Precision::kFp32 ? "shortcut on the input, fp32"
                                               : "shortcut on the input, bf16");
    ExpectSameBits(*on_input, on_input->input, precision, 6);
  }
}

// In bf16 a batch norm after a convolution runs ours without asking cuDNN; one of the same shape
// elsewhere (here on the model's input) still runs cuDNN's, and each is reported as it runs.
TEST_F(CudaNet, EachBatchNormIsReportedAsItRuns) {
  Result<ModelSpec> model = ModelSpec::FromJson(nlohmann::json::parse(R"({
      "input": [4, 6, 6], "classes": 5, "layers": [
        {"kind": "batch_norm", "input": -1},
        {"kind": "conv2d", "input": 0, "out": 4, "kernel": 3, "stride": 1, "pad": 1,
         "bias": false},
        {"kind": "batch_norm", "input": 1},
        {"kind": "activation", "input": 2, "act": "relu"},
        {"kind": "flatten", "input": 3},
        {"kind": "linear", "input": 4, "out": 5}]})"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  Result<std::unique_ptr<Net>> made =
      Net::Create(*model, 6, Precision::kBf16, 0.0f, /*tf32=*/false, stream_, blas_, dnn_);
  ASSERT_TRUE(made.ok()) << made.status().message();
  const Net& net = *made.value();
  const std::string plans = net.Describe();
  std::printf("%s", plans.c_str());
  EXPECT_EQ(net.batch_norms(), 2);
  EXPECT_EQ(net.batch_norms_through_cudnn(), 1) << net.batch_norm_note();
  EXPECT_NE(plans.find("layer 0 batch norm: cuDNN"), std::string::npos);
  EXPECT_NE(plans.find("layer 2 batch norm: ours, 16-bit input"), std::string::npos);
}

}  // namespace
}  // namespace sweep::trainer::cuda
