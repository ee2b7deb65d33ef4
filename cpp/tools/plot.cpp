// SVG error plots (see plot.h). Coordinates: each tensor is a row 330 px high holding two
// 400 x 230 px plot areas; data are mapped linearly, except the histogram's counts, which
// are drawn on a log scale (log10(1 + count)) so that a few outliers stay visible beside
// millions of small errors.
#include "tools/plot.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace tensoracle::tools {

namespace {

constexpr double kWidth = 1000;
constexpr double kRow = 330;
constexpr double kTop = 60;      // the heading
constexpr double kPlotW = 400, kPlotH = 230;
constexpr double kLeft1 = 80, kLeft2 = 570;  // x of each plot area
constexpr double kPlotTop = 62;  // within a row: the row's title and summary come first

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t') out += ' ';
        else out += c;
    }
  }
  return out;
}

std::string num(double v) { return fmt::format("{:.6g}", v); }
std::string px(double v) { return fmt::format("{:.1f}", v); }

// About five "nice" tick values (1, 2 or 5 times a power of ten) covering [0, hi].
std::vector<double> ticks(double hi) {
  if (!(hi > 0) || !std::isfinite(hi)) return {0};
  double raw = hi / 5;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  double step = raw / p < 1.5 ? p : raw / p < 3.5 ? 2 * p : raw / p < 7.5 ? 5 * p : 10 * p;
  std::vector<double> t;
  for (int k = 0; k * step <= hi * (1 + 1e-9) && k < 20; ++k) t.push_back(k * step);
  return t;
}

struct Axis {  // a linear map from [0, hi] to pixels [a, b]
  double hi, a, b;
  double at(double v) const { return a + (b - a) * (hi > 0 ? v / hi : 0); }
};

void axes(std::string& s, double x0, double y0, const Axis& x, const Axis& y, const std::string& xlabel,
          const std::string& ylabel, bool log_counts) {
  s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#444"/>)" "\n", px(x0),
                   px(y0), px(kPlotW), px(kPlotH));
  for (double t : ticks(x.hi)) {
    double xp = x.at(t);
    s += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#444"/>)", px(xp), px(y0 + kPlotH),
                     px(y0 + kPlotH + 5));
    s += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle" class="tick">{}</text>)" "\n", px(xp),
                     px(y0 + kPlotH + 18), num(t));
  }
  if (log_counts) {  // y: log10(1 + count)
    for (double c = 1; std::log10(1 + c) <= y.hi * (1 + 1e-9); c *= 10) {
      double yp = y.at(std::log10(1 + c));
      s += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="#444"/>)", px(x0 - 5), px(yp), px(x0));
      s += fmt::format(R"(<text x="{}" y="{}" text-anchor="end" class="tick">{}</text>)" "\n", px(x0 - 8),
                       px(yp + 4), c >= 1e6 ? fmt::format("1e{}", static_cast<int>(std::log10(c))) : num(c));
    }
  } else {
    for (double t : ticks(y.hi)) {
      double yp = y.at(t);
      s += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="#444"/>)", px(x0 - 5), px(yp), px(x0));
      s += fmt::format(R"(<text x="{}" y="{}" text-anchor="end" class="tick">{}</text>)" "\n", px(x0 - 8),
                       px(yp + 4), num(t));
    }
  }
  s += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{}</text>)" "\n", px(x0 + kPlotW / 2),
                   px(y0 + kPlotH + 36), escape(xlabel));
  s += fmt::format(R"svg(<text x="{}" y="{}" text-anchor="middle" transform="rotate(-90 {} {})">{}</text>)svg" "\n",
                   px(x0 - 58), px(y0 + kPlotH / 2), px(x0 - 58), px(y0 + kPlotH / 2), escape(ylabel));
}

void histogram(std::string& s, const ErrorDistribution& d, double y0) {
  const auto& h = d.histogram;
  std::int64_t most = h.empty() ? 0 : *std::max_element(h.begin(), h.end());
  Axis x{d.max_error > 0 ? d.max_error : 1.0, kLeft1, kLeft1 + kPlotW};
  Axis y{std::log10(1.0 + static_cast<double>(std::max<std::int64_t>(most, 1))), y0 + kPlotH, y0};
  const double bar = kPlotW / static_cast<double>(std::max<std::size_t>(h.size(), 1));
  for (std::size_t b = 0; b < h.size(); ++b) {
    if (h[b] == 0) continue;
    double top = y.at(std::log10(1.0 + static_cast<double>(h[b])));
    s += fmt::format(R"(<rect class="bar" x="{}" y="{}" width="{}" height="{}"><title>{}: |c - r| in [{}, {})</title></rect>)" "\n",
                     px(kLeft1 + b * bar + 0.5), px(top), px(std::max(bar - 1, 0.5)), px(y0 + kPlotH - top), h[b],
                     num(d.max_error * b / h.size()), num(d.max_error * (b + 1) / h.size()));
  }
  axes(s, kLeft1, y0, x, y, "|c - r|  (absolute error)", "elements (log scale)", true);
}

void scatter(std::string& s, const PlotPanel& p, double y0) {
  const ErrorDistribution& d = p.distribution;
  Axis x{d.max_reference > 0 ? d.max_reference * 1.02 : 1.0, kLeft2, kLeft2 + kPlotW};
  Axis y{d.max_error > 0 ? d.max_error * 1.05 : 1.0, y0 + kPlotH, y0};
  const bool tol = p.atol && p.rtol;
  std::size_t outside = 0;
  for (const auto& [m, e] : d.points) {
    bool out = tol && !(e <= *p.atol + *p.rtol * m);
    outside += out;
    s += fmt::format(R"(<circle class="{}" cx="{}" cy="{}" r="2"/>)" "\n", out ? "out" : "in", px(x.at(m)), px(y.at(e)));
  }
  if (tol) {  // |c − r| = atol + rtol·|r|, clipped to the plot area
    s += fmt::format(R"(<clipPath id="clip{0}"><rect x="{1}" y="{2}" width="{3}" height="{4}"/></clipPath>)" "\n",
                     static_cast<long>(y0), px(kLeft2), px(y0), px(kPlotW), px(kPlotH));
    s += fmt::format(R"svg(<line class="tolerance" clip-path="url(#clip{})" x1="{}" y1="{}" x2="{}" y2="{}"/>)svg" "\n",
                     static_cast<long>(y0), px(x.at(0)), px(y.at(*p.atol)), px(x.at(x.hi)),
                     px(y.at(*p.atol + *p.rtol * x.hi)));
  }
  axes(s, kLeft2, y0, x, y, "|r|  (reference magnitude)", "|c - r|", false);
  std::string legend = fmt::format("{} points", d.points.size());
  if (tol)
    legend += fmt::format(", {} in red above |c - r| = {} + {}·|r| (dashed)", outside, num(*p.atol), num(*p.rtol));
  s += fmt::format(R"(<text x="{}" y="{}" class="note">{}</text>)" "\n", px(kLeft2), px(y0 - 8), escape(legend));
}

}  // namespace

std::string error_plot_svg(const std::string& heading, const std::vector<PlotPanel>& panels) {
  const double height = kTop + kRow * static_cast<double>(std::max<std::size_t>(panels.size(), 1)) + 10;
  std::string s = fmt::format(
      R"(<?xml version="1.0" encoding="UTF-8"?>)" "\n"
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" font-family="sans-serif" font-size="12">)" "\n"
      "<title>{2}</title>\n"
      "<style>.tick{{font-size:10px;fill:#333}} .note{{font-size:11px;fill:#333}} .bar{{fill:#4878a8}} "
      ".in{{fill:#4878a8;fill-opacity:0.6}} .out{{fill:#d62728;fill-opacity:0.8}} "
      ".tolerance{{stroke:#d62728;stroke-width:1.5;stroke-dasharray:6 4}}</style>\n"
      R"(<rect width="100%" height="100%" fill="white"/>)" "\n"
      R"(<text x="20" y="28" font-size="16" font-weight="bold">{2}</text>)" "\n"
      R"(<text x="20" y="48" class="note">Left: histogram of |c - r| over finite pairs. Right: |c - r| against |r| for an even sample plus the largest errors.</text>)" "\n",
      px(kWidth), px(height), escape(heading));
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const PlotPanel& p = panels[i];
    const double row = kTop + kRow * static_cast<double>(i);
    s += fmt::format(R"(<g class="tensor"><text x="20" y="{}" font-size="14" font-weight="bold">{}</text>)" "\n",
                     px(row + 22), escape(p.title));
    s += fmt::format(R"(<text x="20" y="{}" class="note">{}</text>)" "\n", px(row + 40), escape(p.summary));
    histogram(s, p.distribution, row + kPlotTop);
    scatter(s, p, row + kPlotTop);
    s += "</g>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace tensoracle::tools
