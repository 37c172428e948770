// A minimal SVG line chart for the examples: series of (x, y) points on shared axes, written to
// a file any browser opens. No dependency beyond the standard library.
//
//   examples::SvgPlot plot("MAML fits", "x", "y");
//   plot.add("true", xs, ys, "#222222", /*dashed=*/true);
//   plot.write("fits.svg");
#pragma once

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace examples {

class SvgPlot {
 public:
  SvgPlot(std::string title, std::string x_label, std::string y_label)
      : title_(std::move(title)), x_label_(std::move(x_label)), y_label_(std::move(y_label)) {}

  void add(std::string name, std::vector<double> xs, std::vector<double> ys, std::string color, bool dashed = false) {
    series_.push_back({std::move(name), std::move(xs), std::move(ys), std::move(color), dashed});
  }

  // Writes the chart; throws std::runtime_error naming the file when it cannot.
  void write(const std::string& path) const {
    std::ofstream out(path);
    if (!out) throw std::runtime_error("cannot write the plot " + path);
    double x_min = INFINITY, x_max = -INFINITY, y_min = INFINITY, y_max = -INFINITY;
    for (const Series& series : series_) {
      for (double x : series.xs) x_min = std::min(x_min, x), x_max = std::max(x_max, x);
      for (double y : series.ys) y_min = std::min(y_min, y), y_max = std::max(y_max, y);
    }
    if (!(x_max > x_min)) x_max = x_min + 1;
    if (!(y_max > y_min)) y_max = y_min + 1;
    constexpr double kWidth = 720, kHeight = 420, kLeft = 60, kRight = 170, kTop = 40, kBottom = 50;
    auto px = [&](double x) { return kLeft + (x - x_min) / (x_max - x_min) * (kWidth - kLeft - kRight); };
    auto py = [&](double y) { return kHeight - kBottom - (y - y_min) / (y_max - y_min) * (kHeight - kTop - kBottom); };
    out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
        << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    out << "<text x=\"" << kWidth / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << title_
        << "</text>\n";
    out << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kWidth - kLeft - kRight << "\" height=\""
        << kHeight - kTop - kBottom << "\" fill=\"none\" stroke=\"#888\"/>\n";
    for (int tick = 0; tick <= 4; ++tick) {
      const double x = x_min + (x_max - x_min) * tick / 4, y = y_min + (y_max - y_min) * tick / 4;
      out << "<text x=\"" << px(x) << "\" y=\"" << kHeight - kBottom + 16 << "\" text-anchor=\"middle\">" << round2(x)
          << "</text>\n<text x=\"" << kLeft - 6 << "\" y=\"" << py(y) + 4 << "\" text-anchor=\"end\">" << round2(y)
          << "</text>\n";
    }
    out << "<text x=\"" << (kLeft + kWidth - kRight) / 2 << "\" y=\"" << kHeight - 12 << "\" text-anchor=\"middle\">"
        << x_label_ << "</text>\n<text x=\"16\" y=\"" << kHeight / 2 << "\" transform=\"rotate(-90 16 " << kHeight / 2
        << ")\" text-anchor=\"middle\">" << y_label_ << "</text>\n";
    for (size_t s = 0; s < series_.size(); ++s) {
      const Series& series = series_[s];
      out << "<polyline fill=\"none\" stroke=\"" << series.color << "\" stroke-width=\"1.8\""
          << (series.dashed ? " stroke-dasharray=\"5,4\"" : "") << " points=\"";
      for (size_t i = 0; i < series.xs.size() && i < series.ys.size(); ++i) {
        out << px(series.xs[i]) << "," << py(series.ys[i]) << " ";
      }
      const double legend_y = kTop + 14 + 18 * static_cast<double>(s);
      out << "\"/>\n<line x1=\"" << kWidth - kRight + 12 << "\" y1=\"" << legend_y - 4 << "\" x2=\""
          << kWidth - kRight + 36 << "\" y2=\"" << legend_y - 4 << "\" stroke=\"" << series.color
          << "\" stroke-width=\"2\"" << (series.dashed ? " stroke-dasharray=\"5,4\"" : "") << "/>\n<text x=\""
          << kWidth - kRight + 42 << "\" y=\"" << legend_y << "\">" << series.name << "</text>\n";
    }
    out << "</svg>\n";
  }

 private:
  struct Series {
    std::string name;
    std::vector<double> xs, ys;
    std::string color;
    bool dashed;
  };

  static double round2(double value) { return std::round(value * 100) / 100 + 0.0; }  // + 0.0: no "-0"

  std::string title_, x_label_, y_label_;
  std::vector<Series> series_;
};

}  // namespace examples
