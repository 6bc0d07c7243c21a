// The main of a fuzz target outside --config=fuzz: feeds every file of the corpus
// directories given as arguments to LLVMFuzzerTestOneInput, once each, so that the
// committed corpus (every input libFuzzer kept) runs as a regression test in the suite.
// Under --config=fuzz libFuzzer's own main takes its place.
#include <dirent.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  size_t inputs = 0;
  for (int a = 1; a < argc; ++a) {
    DIR* dir = ::opendir(argv[a]);
    if (dir == nullptr) {
      std::fprintf(stderr, "corpus %s: cannot open\n", argv[a]);
      return 1;
    }
    std::vector<std::string> files;
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.') files.push_back(std::string(argv[a]) + "/" + entry->d_name);
    }
    ::closedir(dir);
    for (const std::string& path : files) {
      std::ifstream in(path, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++inputs;
    }
  }
  std::printf("%zu corpus inputs run\n", inputs);
  return inputs > 0 ? 0 : 1;
}
