// optimizer/loss_scale.cc — the dynamic loss-scale policy (see loss_scale.h).
#include "optimizer/loss_scale.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/core/check.h"

namespace tessera {

Status ValidateLossScaleConfig(const LossScaleConfig& c) {
  auto bad = [](const std::string& what) { return InvalidArgument("loss scale: " + what); };
  if (!(c.initial > 0.0) || !std::isfinite(c.initial)) {
    return bad("initial " + std::to_string(c.initial) + " must be > 0 and finite");
  }
  if (!(c.growth_factor > 1.0) || !std::isfinite(c.growth_factor)) {
    return bad("growth_factor " + std::to_string(c.growth_factor) + " must be > 1");
  }
  if (!(c.backoff_factor > 0.0 && c.backoff_factor < 1.0)) {
    return bad("backoff_factor " + std::to_string(c.backoff_factor) + " must be in (0, 1)");
  }
  if (c.growth_interval < 1) {
    return bad("growth_interval " + std::to_string(c.growth_interval) + " must be >= 1");
  }
  if (!(c.min_scale > 0.0) || !(c.min_scale <= c.max_scale) || !std::isfinite(c.max_scale)) {
    return bad("need 0 < min_scale <= max_scale (finite), got min_scale " +
               std::to_string(c.min_scale) + ", max_scale " + std::to_string(c.max_scale));
  }
  if (c.dynamic && (c.initial < c.min_scale || c.initial > c.max_scale)) {
    return bad("initial " + std::to_string(c.initial) + " outside [min_scale, max_scale]");
  }
  return Status::Ok();
}

LossScaler::LossScaler(const LossScaleConfig& config) : config_(config), scale_(config.initial) {
  const Status valid = ValidateLossScaleConfig(config_);
  TESSERA_CHECK_MSG(valid.ok(), "LossScaler: %s", valid.message().c_str());
}

bool LossScaler::Update(bool found_overflow) {
  if (found_overflow) {
    ++skipped_;
    good_steps_ = 0;
    if (config_.dynamic) scale_ = std::max(scale_ * config_.backoff_factor, config_.min_scale);
    return true;
  }
  ++good_steps_;
  if (config_.dynamic && good_steps_ >= config_.growth_interval) {
    scale_ = std::min(scale_ * config_.growth_factor, config_.max_scale);
    good_steps_ = 0;  // the next growth needs another growth_interval good steps
  }
  return false;
}

void LossScaler::Restore(double scale, int64_t good_steps, int64_t skipped) {
  TESSERA_CHECK(scale > 0.0 && std::isfinite(scale) && good_steps >= 0 && skipped >= 0);
  scale_ = scale;
  good_steps_ = good_steps;
  skipped_ = skipped;
}

}  // namespace tessera
