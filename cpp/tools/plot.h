// The SVG error plot of `tensoracle compare --plot`: for each tensor, a histogram of |c − r|
// and a scatter of |c − r| against |r| with the tolerance line |c − r| = atol + rtol·|r|.
// Plain SVG 1.1 with its own text, axes and legend: any web browser shows it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tensoracle/compare.h"

namespace tensoracle::tools {

struct PlotPanel {
  std::string title;                 // "tensor 'result' — float32 (16, 16)"
  ErrorDistribution distribution;
  std::optional<double> atol, rtol;  // both set: the tolerance line is drawn
  std::string summary;               // one line of metrics under the title
};

// The whole document. `heading` is the first line ("candidate.npz vs reference.npz").
std::string error_plot_svg(const std::string& heading, const std::vector<PlotPanel>& panels);

}  // namespace tensoracle::tools
