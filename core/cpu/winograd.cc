// The CPU's Winograd F(2 x 2, 3 x 3) transforms: the 4 x 4 input tile d becomes B^T d B, the
// 4 x 4 product m becomes the 2 x 2 outputs A^T m A and the 3 x 3 filter g becomes G g G^T, with
//   B^T = [1  0 -1  0]      A^T = [1  1  1  0]      G = [1    0    0  ]
//         [0  1  1  0]            [0  1 -1 -1]          [1/2  1/2  1/2]
//         [0 -1  1  0]                                  [1/2 -1/2  1/2]
//         [0  1  0 -1]                                  [0    0    1  ]
// (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2016). The tile transforms
// run one plane at a time and four neighbouring tiles of a row at a time, as vectors of four (GCC
// vector extensions): a tile row of the CNN's 14 x 14 planes is 7 tiles, too short for loops over
// a row to vectorize well. Every row has at least four tiles (the outputs at least 7 wide,
// kernels.h). The filter transforms go one pair of channels at a time.
#include "core/cpu/winograd.h"

#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/cpu/strided_loop.h"
#include "core/dtype.h"

// Doubles come four to a 32-byte vector, which GCC notes are passed differently with AVX: they
// only pass between the inlined helpers below.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace distgrad::kernels::cpu_winograd {
namespace {

// Tiles of 2 x 2 outputs, per image row and column.
int64_t tile_rows(const Window2d& w) { return (w.out_h + 1) / 2; }
int64_t tile_columns(const Window2d& w) { return (w.out_w + 1) / 2; }

// The first of the four tiles a row's group `next` (a multiple of 4) takes: a row whose tiles do
// not fill whole groups ends with a group overlapping the one before it (its tiles are computed
// twice, to the same values). Rows have at least four tiles (kernels.h).
int64_t last_four(int64_t next, int64_t columns) { return std::min(next, columns - 4); }

// Four values of T, one per tile.
template <typename T>
struct FourTiles {
  using Values __attribute__((vector_size(4 * sizeof(T)))) = T;
  using Picks __attribute__((vector_size(4 * sizeof(T)))) = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  // Values at any address of a T (unaligned vector loads and stores).
  using Unaligned __attribute__((vector_size(4 * sizeof(T)), aligned(alignof(T)), may_alias)) = T;

  static Values load(const T* p) { return *reinterpret_cast<const Unaligned*>(p); }
  static void store(T* p, Values v) { *reinterpret_cast<Unaligned*>(p) = v; }
  // p[2 k + first] for k = 0..3.
  static Values every_other(const T* p, int first) {
    return __builtin_shuffle(load(p), load(p + 4), Picks{first, first + 2, first + 4, first + 6});
  }
};

// B^T d B of four neighbouring tiles into tiles[position * tile_stride + k] (tile k, position
// 0..15). The padded plane is split into its even and odd columns, rows `row_length` apart:
// `even` and `odd` point at the first tile's top row, so column 2 k + s of tile k's row r is
// even[r * row_length + k + s / 2] for even s, odd[...] for odd s.
template <typename T>
inline void input_group(const T* even, const T* odd, int64_t row_length, T* tiles, int64_t tile_stride) {
  using Four = FourTiles<T>;
  typename Four::Values by_column[4][4];  // (d B)[r][j]
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    const T* e = even + r * row_length;
    const T* o = odd + r * row_length;
    const auto d0 = Four::load(e), d1 = Four::load(o), d2 = Four::load(e + 1), d3 = Four::load(o + 1);
    by_column[r][0] = d0 - d2;
    by_column[r][1] = d1 + d2;
    by_column[r][2] = d2 - d1;
    by_column[r][3] = d1 - d3;
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {  // B^T (d B), column j
    Four::store(tiles + j * tile_stride, by_column[0][j] - by_column[2][j]);
    Four::store(tiles + (4 + j) * tile_stride, by_column[1][j] + by_column[2][j]);
    Four::store(tiles + (8 + j) * tile_stride, by_column[2][j] - by_column[1][j]);
    Four::store(tiles + (12 + j) * tile_stride, by_column[1][j] - by_column[3][j]);
  }
}

// A^T m A + shift of four neighbouring tiles (m: products[position * tile_stride + k] for tile k)
// as two rows of eight outputs, `top` and `bottom`.
template <typename T>
inline void output_group(const T* products, int64_t tile_stride, T shift, T* top, T* bottom) {
  using Four = FourTiles<T>;
  using Values = typename Four::Values;
  using Picks = typename Four::Picks;
  Values by_row[4][2];  // (m A)[i][j]
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const T* m = products + 4 * i * tile_stride;
    const Values m0 = Four::load(m), m1 = Four::load(m + tile_stride), m2 = Four::load(m + 2 * tile_stride);
    const Values m3 = Four::load(m + 3 * tile_stride);
    by_row[i][0] = m0 + m1 + m2;
    by_row[i][1] = m1 - m2 - m3;
  }
  const Values bias = Values{} + shift;
  const auto put = [](T* line, Values left, Values right) {  // left[k], right[k] at 2 k, 2 k + 1
    Four::store(line, __builtin_shuffle(left, right, Picks{0, 4, 1, 5}));
    Four::store(line + 4, __builtin_shuffle(left, right, Picks{2, 6, 3, 7}));
  };
  put(top, by_row[0][0] + by_row[1][0] + by_row[2][0] + bias, by_row[0][1] + by_row[1][1] + by_row[2][1] + bias);
  put(bottom, by_row[1][0] - by_row[2][0] - by_row[3][0] + bias, by_row[1][1] - by_row[2][1] - by_row[3][1] + bias);
}

// A g A^T of four neighbouring tiles' 2 x 2 output gradients g, given as two rows of eight
// values, `top` and `bottom`, into tiles[position * tile_stride + k] (tile k, position 0..15):
// the adjoint of output_group's A^T m A.
template <typename T>
inline void output_grad_group(const T* top, const T* bottom, T* tiles, int64_t tile_stride) {
  using Four = FourTiles<T>;
  using Values = typename Four::Values;
  const Values g00 = Four::every_other(top, 0), g01 = Four::every_other(top, 1);
  const Values g10 = Four::every_other(bottom, 0), g11 = Four::every_other(bottom, 1);
  const Values by_row[4][2] = {{g00, g01}, {g00 + g10, g01 + g11}, {g00 - g10, g01 - g11}, {-g10, -g11}};  // A g
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // (A g) A^T, row i
    T* row = tiles + 4 * i * tile_stride;
    Four::store(row, by_row[i][0]);
    Four::store(row + tile_stride, by_row[i][0] + by_row[i][1]);
    Four::store(row + 2 * tile_stride, by_row[i][0] - by_row[i][1]);
    Four::store(row + 3 * tile_stride, -by_row[i][1]);
  }
}

// B x B^T of four neighbouring tiles x (tiles[position * tile_stride + k] for tile k), the
// adjoint of input_group's B^T d B, added into the padded plane split as input_group reads it:
// column 2 k + s of tile k's row r is even[r * row_length + k + s / 2] for even s, odd[...] for
// odd s. Neighbouring tiles share two columns (column s + 2 of tile k is column s of tile k + 1),
// so the plane's columns at tile k get columns 0 and 1 of tile k and columns 2 and 3 of tile
// k - 1; `left[r]` holds row r's columns 2 and 3 of the group before (zeros before a row's first
// group) and gets this group's. Tiles below `first_new` (those an earlier group of the row took:
// the last group of a row may overlap the one before) add nothing.
template <typename T>
inline void input_grad_group(const T* tiles, int64_t tile_stride, int first_new, T* even, T* odd, int64_t row_length,
                             typename FourTiles<T>::Values (&left)[4][2]) {
  using Four = FourTiles<T>;
  using Values = typename Four::Values;
  using Picks = typename Four::Picks;
  Values by_row[4][4];  // (B x)[i][j]
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const Values x0 = Four::load(tiles + j * tile_stride), x1 = Four::load(tiles + (4 + j) * tile_stride);
    const Values x2 = Four::load(tiles + (8 + j) * tile_stride), x3 = Four::load(tiles + (12 + j) * tile_stride);
    by_row[0][j] = x0;
    by_row[1][j] = x1 - x2 + x3;
    by_row[2][j] = x1 + x2 - x0;
    by_row[3][j] = -x3;
  }
  const Picks lane{0, 1, 2, 3};
  const Picks is_new = lane >= first_new;
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {  // (B x) B^T, row r
    const Values y0 = by_row[r][0], y1 = by_row[r][1], y2 = by_row[r][2], y3 = by_row[r][3];
    const Values column[4] = {y0, y1 - y2 + y3, y1 + y2 - y0, -y3};
    // Lane k: columns 0 (1) of tile k plus columns 2 (3) of tile k - 1.
    const Values at_even = column[0] + __builtin_shuffle(left[r][0], column[2], Picks{3, 4, 5, 6});
    const Values at_odd = column[1] + __builtin_shuffle(left[r][1], column[3], Picks{3, 4, 5, 6});
    T* e = even + r * row_length;
    T* o = odd + r * row_length;
    Four::store(e, Four::load(e) + (is_new ? at_even : Values{}));
    Four::store(o, Four::load(o) + (is_new ? at_odd : Values{}));
    left[r][0] = column[2];
    left[r][1] = column[3];
  }
}

// The plane of a Winograd window inside a border of zeros (the padding, and what the last tiles
// read past the output's edge), split into its even and odd columns, as input_group reads it and
// input_grad_group writes it: every group lies inside. Input row ih is padded row ih + pad_h; its
// column iw is padded column iw + pad_w, at index (iw + pad_w) / 2 of the even or the odd half.
template <typename T>
class SplitPlane {
 public:
  explicit SplitPlane(const Window2d& w)
      : w_(w),
        half_w_(tile_columns(w) + 1),
        even_(static_cast<size_t>((2 * tile_rows(w) + 2) * half_w_)),
        odd_(even_.size()) {}

  int64_t row_length() const { return half_w_; }
  T* even() { return even_.data(); }
  T* odd() { return odd_.data(); }
  void zero() {
    std::fill(even_.begin(), even_.end(), T(0));
    std::fill(odd_.begin(), odd_.end(), T(0));
  }

  // Input row ih of `image` into the plane (the border is left as it is).
  void put_row(const T* image, int64_t ih) {
    T *left, *right;
    pair_halves(ih, left, right);
    const T* line = image + ih * w_.width;
    const int64_t pairs = w_.width / 2;
    using Four = FourTiles<T>;
    for (int64_t next = 0; pairs >= 4 && next < pairs; next += 4) {
      const int64_t k = std::min(next, pairs - 4);  // the last four may overlap the ones before
      Four::store(left + k, Four::every_other(line + 2 * k, 0));
      Four::store(right + k, Four::every_other(line + 2 * k, 1));
    }
    for (int64_t k = 0; pairs < 4 && k < pairs; ++k) {
      left[k] = line[2 * k];
      right[k] = line[2 * k + 1];
    }
    if (w_.width % 2 != 0) left[pairs] = line[2 * pairs];
  }

  // Input row ih of `image` from the plane (the inverse of put_row).
  void take_row(T* image, int64_t ih) {
    T *left, *right;
    pair_halves(ih, left, right);
    T* line = image + ih * w_.width;
    const int64_t pairs = w_.width / 2;
    using Four = FourTiles<T>;
    using Picks = typename Four::Picks;
    for (int64_t next = 0; pairs >= 4 && next < pairs; next += 4) {
      const int64_t k = std::min(next, pairs - 4);
      const auto a = Four::load(left + k), b = Four::load(right + k);
      Four::store(line + 2 * k, __builtin_shuffle(a, b, Picks{0, 4, 1, 5}));
      Four::store(line + 2 * k + 4, __builtin_shuffle(a, b, Picks{2, 6, 3, 7}));
    }
    for (int64_t k = 0; pairs < 4 && k < pairs; ++k) {
      line[2 * k] = left[k];
      line[2 * k + 1] = right[k];
    }
    if (w_.width % 2 != 0) line[2 * pairs] = left[pairs];
  }

 private:
  // Where input row ih's columns 2 k (`left`) and 2 k + 1 (`right`) lie, k = 0, 1, ...
  void pair_halves(int64_t ih, T*& left, T*& right) {
    T* row_even = even_.data() + (ih + w_.pad_h) * half_w_;
    T* row_odd = odd_.data() + (ih + w_.pad_h) * half_w_;
    const bool even_padding = w_.pad_w % 2 == 0;
    left = (even_padding ? row_even : row_odd) + w_.pad_w / 2;
    right = (even_padding ? row_odd : row_even) + (w_.pad_w + 1) / 2;
  }

  Window2d w_;
  int64_t half_w_;
  std::vector<T> even_, odd_;
};

// G v of a filter's column or row v (3 values), and the adjoint G^T u of 4 values.
template <typename T>
void filter_transform(const T (&v)[3], T (&out)[4]) {
  out[0] = v[0];
  out[1] = (v[0] + v[1] + v[2]) * T(0.5);
  out[2] = (v[0] - v[1] + v[2]) * T(0.5);
  out[3] = v[2];
}
template <typename T>
void filter_transform_adjoint(const T (&u)[4], T (&out)[3]) {
  out[0] = u[0] + (u[1] + u[2]) * T(0.5);
  out[1] = (u[1] - u[2]) * T(0.5);
  out[2] = (u[1] + u[2]) * T(0.5) + u[3];
}

}  // namespace

void input_tiles(const Tensor& tiles, const Tensor& in, const Window2d& w) {
  dispatch_floating(in.dtype(), "winograd_input_tiles", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in.data_ptr());
    T* dst = static_cast<T*>(tiles.data_ptr());
    const int64_t rows = tile_rows(w), columns = tile_columns(w), per_image = rows * columns;
    const int64_t tile_stride = tiles.stride(0), channel_stride = tiles.stride(1);
    const int64_t planes = w.batch * w.channels;
#pragma omp parallel if (planes * per_image * 16 >= cpu::kParallelGrain)
    {
      SplitPlane<T> plane(w);  // zeros once: every plane writes the same positions, the border stays zero
      const int64_t half_w = plane.row_length();
#pragma omp for
      for (int64_t p = 0; p < planes; ++p) {
        const T* image = src + p * w.height * w.width;
        for (int64_t ih = 0; ih < w.height; ++ih) plane.put_row(image, ih);
        T* out = dst + p % w.channels * channel_stride + p / w.channels * per_image;
        for (int64_t ty = 0; ty < rows; ++ty) {
          for (int64_t next = 0; next < columns; next += 4) {
            const int64_t tx = last_four(next, columns), offset = 2 * ty * half_w + tx;
            input_group(plane.even() + offset, plane.odd() + offset, half_w, out + ty * columns + tx, tile_stride);
          }
        }
      }
    }
  });
}

void input_tiles_adjoint(const Tensor& grad_in, const Tensor& tiles, const Window2d& w) {
  dispatch_floating(grad_in.dtype(), "winograd_input_tiles_adjoint", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Values = typename FourTiles<T>::Values;
    const T* src = static_cast<const T*>(tiles.data_ptr());
    T* dst = static_cast<T*>(grad_in.data_ptr());
    const int64_t rows = tile_rows(w), columns = tile_columns(w), per_image = rows * columns;
    const int64_t tile_stride = tiles.stride(0), channel_stride = tiles.stride(1);
    const int64_t planes = w.batch * w.channels;
#pragma omp parallel if (planes * per_image * 16 >= cpu::kParallelGrain)
    {
      SplitPlane<T> plane(w);
      const int64_t half_w = plane.row_length();
#pragma omp for
      for (int64_t p = 0; p < planes; ++p) {
        plane.zero();
        T *even = plane.even(), *odd = plane.odd();
        const T* x = src + p % w.channels * channel_stride + p / w.channels * per_image;
        for (int64_t ty = 0; ty < rows; ++ty) {
          Values left[4][2] = {};
          for (int64_t next = 0; next < columns; next += 4) {
            const int64_t tx = last_four(next, columns), offset = 2 * ty * half_w + tx;
            input_grad_group(x + ty * columns + tx, tile_stride, static_cast<int>(next - tx), even + offset,
                             odd + offset, half_w, left);
          }
          for (int r = 0; r < 4; ++r) {  // the row's last tile's columns 2 and 3: the plane's last two
            even[(2 * ty + r) * half_w + columns] += left[r][0][3];
            odd[(2 * ty + r) * half_w + columns] += left[r][1][3];
          }
        }
        T* image = dst + p * w.height * w.width;
        for (int64_t ih = 0; ih < w.height; ++ih) plane.take_row(image, ih);
      }
    }
  });
}

namespace {

// Calls for_plane(p) for every plane p < planes (in parallel), then the group visitor it returns
// as group(ty, tx, whole) for every group of four tiles of p: tile row ty, first tile tx, and
// whether the group's 2 x 8 outputs all lie inside the plane (else the last group of an
// odd-width row, or the last row of an odd-height plane).
template <typename ForPlane>
void for_each_output_group(const Window2d& w, int64_t planes, ForPlane for_plane) {
  const int64_t rows = tile_rows(w), columns = tile_columns(w);
#pragma omp parallel for if (planes * rows * columns * 16 >= cpu::kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    auto group = for_plane(p);
    for (int64_t ty = 0; ty < rows; ++ty) {
      for (int64_t next = 0; next < columns; next += 4) {
        const int64_t tx = last_four(next, columns);
        group(ty, tx, 2 * tx + 8 <= w.out_w && 2 * ty + 1 < w.out_h);
      }
    }
  }
}

}  // namespace

void output_tiles(const Tensor& out, const Tensor& products, const Tensor& bias, const Window2d& w) {
  dispatch_floating(out.dtype(), "winograd_output_tiles", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(products.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    const T* bias_data = data_or_null<T>(bias);
    const int64_t out_channels = products.size(1), columns = tile_columns(w);
    const int64_t per_image = tile_rows(w) * columns;
    const int64_t tile_stride = products.stride(0), channel_stride = products.stride(1);
    for_each_output_group(w, w.batch * out_channels, [&](int64_t p) {
      const int64_t o = p % out_channels;
      const T* m = src + o * channel_stride + p / out_channels * per_image;
      const T shift = bias_data != nullptr ? bias_data[o] : T(0);
      T* plane = dst + p * w.out_h * w.out_w;
      return [=, &w](int64_t ty, int64_t tx, bool whole) {
        T* top = plane + 2 * ty * w.out_w + 2 * tx;
        if (whole) {
          output_group(m + ty * columns + tx, tile_stride, shift, top, top + w.out_w);
          return;
        }
        T lines[2][8];  // cut to the plane
        output_group(m + ty * columns + tx, tile_stride, shift, lines[0], lines[1]);
        const int64_t width = std::min<int64_t>(8, w.out_w - 2 * tx);
        std::copy_n(lines[0], width, top);
        if (2 * ty + 1 < w.out_h) std::copy_n(lines[1], width, top + w.out_w);
      };
    });
  });
}

void output_grad_tiles(const Tensor& tiles, const Tensor& grad_out, const Window2d& w) {
  dispatch_floating(grad_out.dtype(), "winograd_output_grad_tiles", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(grad_out.data_ptr());
    T* dst = static_cast<T*>(tiles.data_ptr());
    const int64_t out_channels = tiles.size(1), columns = tile_columns(w);
    const int64_t per_image = tile_rows(w) * columns;
    const int64_t tile_stride = tiles.stride(0), channel_stride = tiles.stride(1);
    for_each_output_group(w, w.batch * out_channels, [&](int64_t p) {
      const T* plane = src + p * w.out_h * w.out_w;
      T* out = dst + p % out_channels * channel_stride + p / out_channels * per_image;
      return [=, &w](int64_t ty, int64_t tx, bool whole) {
        const T* top = plane + 2 * ty * w.out_w + 2 * tx;
        T* first = out + ty * columns + tx;
        if (whole) {
          output_grad_group(top, top + w.out_w, first, tile_stride);
          return;
        }
        T lines[2][8] = {};  // cut to the plane, zeros past it
        const int64_t width = std::min<int64_t>(8, w.out_w - 2 * tx);
        std::copy_n(top, width, lines[0]);
        if (2 * ty + 1 < w.out_h) std::copy_n(top + w.out_w, width, lines[1]);
        output_grad_group(lines[0], lines[1], first, tile_stride);
      };
    });
  });
}

// U = G g G^T of each pair's filter g (rows of weight [O * C, 9]) at filters[4 i + j][pair].
void filters(const Tensor& filters, const Tensor& weight) {
  dispatch_floating(weight.dtype(), "winograd_filters", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(weight.data_ptr());
    T* dst = static_cast<T*>(filters.data_ptr());
    const int64_t pairs = weight.size(0) * weight.size(1);
#pragma omp parallel for if (16 * pairs >= cpu::kParallelGrain)
    for (int64_t pair = 0; pair < pairs; ++pair) {
      const T* g = src + 9 * pair;
      T left[4][3];  // G g
      for (int b = 0; b < 3; ++b) {
        T column[4];
        filter_transform({g[b], g[3 + b], g[6 + b]}, column);
        for (int i = 0; i < 4; ++i) left[i][b] = column[i];
      }
      for (int i = 0; i < 4; ++i) {  // row i of (G g) G^T
        T row[4];
        filter_transform(left[i], row);
        for (int j = 0; j < 4; ++j) dst[(4 * i + j) * pairs + pair] = row[j];
      }
    }
  });
}

// dg = G^T dU G of each pair's transform gradient dU (transformed_grad[4 i + j][pair]).
void filters_adjoint(const Tensor& grad_weight, const Tensor& transformed_grad) {
  dispatch_floating(grad_weight.dtype(), "winograd_filters_adjoint", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(transformed_grad.data_ptr());
    T* dst = static_cast<T*>(grad_weight.data_ptr());
    const int64_t pairs = grad_weight.size(0) * grad_weight.size(1);
#pragma omp parallel for if (16 * pairs >= cpu::kParallelGrain)
    for (int64_t pair = 0; pair < pairs; ++pair) {
      T right[4][3];  // dU G
      for (int i = 0; i < 4; ++i) {
        filter_transform_adjoint({src[(4 * i) * pairs + pair], src[(4 * i + 1) * pairs + pair],
                                  src[(4 * i + 2) * pairs + pair], src[(4 * i + 3) * pairs + pair]},
                                 right[i]);
      }
      T* g = dst + 9 * pair;
      for (int b = 0; b < 3; ++b) {  // column b of G^T (dU G)
        T column[3];
        filter_transform_adjoint({right[0][b], right[1][b], right[2][b], right[3][b]}, column);
        for (int a = 0; a < 3; ++a) g[3 * a + b] = column[a];
      }
    }
  });
}

}  // namespace distgrad::kernels::cpu_winograd
