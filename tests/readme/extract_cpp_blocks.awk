# Writes each ```cpp block of a Markdown file to OUT/block_<n>.cc after `#include "PRELUDE"`: a block
# with `int main(` as it is (a program), any other inside a function (a fragment of one).
#   awk -v OUT=dir -v PRELUDE=tests/readme/readme_prelude.h -f extract_cpp_blocks.awk README.md
/^```cpp$/ { in_block = 1; code = ""; next }
in_block && /^```$/ {
  in_block = 0
  file = sprintf("%s/block_%d.cc", OUT, ++blocks)
  printf "// Generated from README.md's ```cpp block %d by tests/readme/extract_cpp_blocks.awk.\n", blocks > file
  printf "#include \"%s\"\n\n", PRELUDE > file
  if (code ~ /int main\(/) {
    printf "%s", code > file
  } else {
    printf "[[maybe_unused]] void readme_block_%d() {\n%s}\n", blocks, code > file
  }
  close(file)
  next
}
in_block { code = code $0 "\n" }
