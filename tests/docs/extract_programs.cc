// extract_programs <source-root> <out-dir>
//
// Finds every fenced ```cpp block that contains `main(` in <source-root>/README.md and
// <source-root>/docs/*.md and writes each one, as written, to <out-dir>/<name>.cc, where <name>
// says where it came from (docs/ops.md, fence on line 28 -> docs_ops_md_L28). Each file starts with
// a #line directive, so the compiler reports errors at the markdown file and line
// ("docs/ops.md:41: error: ..."). <out-dir>/programs.txt lists one program a line:
// "<name> <file>:<fence line> <needs>", where <needs> is "mpi" for a program that uses a name of
// collective/mpi/mpi.h (chorus.h includes it only in builds with MPI) and "-" otherwise.
//
// Exit status: 0 with at least one program written; 1 on an unterminated fence, an unreadable
// file or no program at all (the test must not pass by finding nothing); 2 on bad arguments.
// Used by docs_programs_test.cmake (the CTest test docs_programs_compile).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Program {
  std::string name;    // a target name: [A-Za-z0-9_]
  std::string where;   // "docs/ops.md:28", the line of the opening fence
  int first_line = 0;  // line of the block's first code line
  std::string code;
};

// What the program needs beyond a default build: "mpi" or "-".
std::string needs(const std::string& code) {
  // Every name collective/mpi/mpi.h declares.
  for (const char* mpi_api :
       {"MpiThreadLevel", "MpiEnvironment", "mpi_cuda_aware", "MpiCommunicatorOptions", "make_mpi_communicator"})
    if (code.find(mpi_api) != std::string::npos) return "mpi";
  return "-";
}

std::string trim_left(const std::string& s) {
  std::size_t i = s.find_first_not_of(" \t");
  return i == std::string::npos ? std::string() : s.substr(i);
}

std::string trim(const std::string& s) {
  std::string t = trim_left(s);
  std::size_t e = t.find_last_not_of(" \t\r");
  return e == std::string::npos ? std::string() : t.substr(0, e + 1);
}

bool opens_cpp_fence(const std::string& line) {
  std::string t = trim(line);
  return t == "```cpp" || t == "```c++" || t == "```cxx";
}

bool is_fence(const std::string& line) { return trim_left(line).rfind("```", 0) == 0; }

std::string target_name(const std::string& rel, int line) {
  std::string name;
  for (char c : rel) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name + "_L" + std::to_string(line);
}

// Appends the programs of one markdown file; false (with a message) on an unterminated fence.
bool extract(const fs::path& file, const std::string& rel, std::vector<Program>& out) {
  std::ifstream in(file);
  if (!in) {
    std::cerr << rel << ": cannot read\n";
    return false;
  }
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (!is_fence(lines[i])) continue;
    const bool cpp = opens_cpp_fence(lines[i]);
    const std::size_t indent = lines[i].size() - trim_left(lines[i]).size();  // fences inside lists
    std::size_t j = i + 1;
    while (j < lines.size() && !is_fence(lines[j])) ++j;
    if (j == lines.size()) {
      std::cerr << rel << ":" << i + 1 << ": fence never closed\n";
      return false;
    }
    if (cpp) {
      Program p;
      p.name = target_name(rel, static_cast<int>(i + 1));
      p.where = rel + ":" + std::to_string(i + 1);
      p.first_line = static_cast<int>(i + 2);
      for (std::size_t k = i + 1; k < j; ++k) {
        const std::string& l = lines[k];
        std::size_t strip = std::min(indent, l.size() - trim_left(l).size());
        p.code += l.substr(strip) + "\n";
      }
      if (p.code.find("main(") != std::string::npos) out.push_back(std::move(p));
    }
    i = j;  // skip the block, whatever its language: a ``` inside it is not an opening fence
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: extract_programs <source-root> <out-dir>\n";
    return 2;
  }
  const fs::path root = argv[1];
  const fs::path out_dir = argv[2];
  std::vector<std::string> docs = {"README.md"};
  std::vector<std::string> guides;
  for (const auto& e : fs::directory_iterator(root / "docs"))
    if (e.is_regular_file() && e.path().extension() == ".md") guides.push_back("docs/" + e.path().filename().string());
  std::sort(guides.begin(), guides.end());
  docs.insert(docs.end(), guides.begin(), guides.end());

  std::vector<Program> programs;
  for (const std::string& rel : docs)
    if (!extract(root / rel, rel, programs)) return 1;
  if (programs.empty()) {
    std::cerr << "no ```cpp block with main( in README.md or docs/*.md: the extraction is broken\n";
    return 1;
  }

  fs::create_directories(out_dir);
  std::ofstream list(out_dir / "programs.txt");
  for (const Program& p : programs) {
    std::ofstream src(out_dir / (p.name + ".cc"));
    src << "#line " << p.first_line << " \"" << p.where.substr(0, p.where.rfind(':')) << "\"\n" << p.code;
    list << p.name << " " << p.where << " " << needs(p.code) << "\n";
    if (!src || !list) {
      std::cerr << "cannot write under " << out_dir << "\n";
      return 1;
    }
  }
  std::cout << programs.size() << " programs from " << docs.size() << " markdown files\n";
  return 0;
}
