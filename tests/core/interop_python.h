// The Python that interop tests run real TensorFlow and TensorBoard in.
//
// chorus never depends on Python; its tests check chorus's files with the real readers and
// writers (tf.train.load_checkpoint, TensorBoard's EventAccumulator, ...). Those live in a virtual
// environment with the pinned packages of tests/interop/requirements.txt, made by
// `scripts/install-deps.sh --test` (the README's test command; scripts/test-python-env.sh).
//
// Which Python: $CHORUS_TF_PYTHON when set (at test run time), else the venv's python that
// tests/CMakeLists.txt compiled in as CHORUS_TEST_PYTHON (~/.cache/chorus/test-venv/bin/python,
// or $CHORUS_TEST_VENV at configure time).
//
// When it is missing or cannot import what a test needs, the test is skipped with the reason and
// the command that enables it, except under CI=true, where it FAILS: CI must never pass because a
// broken reader or writer was not looked at.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

namespace chorus::testing {

struct InteropPython {
  std::string path;  // empty when none is usable
  std::string why;   // the reason, when empty
};

// Finds the interop Python and checks that it can `import <modules>` (comma-separated, as in a
// Python import statement). Runs one short Python process.
inline InteropPython find_interop_python(const std::string& modules) {
  std::string py;
  if (const char* env = std::getenv("CHORUS_TF_PYTHON"); env && *env) {
    py = env;
  } else {
#ifdef CHORUS_TEST_PYTHON
    py = CHORUS_TEST_PYTHON;
#endif
  }
  if (py.empty())
    return {"", "no interop Python configured (CHORUS_TEST_PYTHON not compiled in, CHORUS_TF_PYTHON unset)"};
  const std::string cmd = "TF_CPP_MIN_LOG_LEVEL=3 '" + py + "' -c 'import " + modules + "' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return {"", "'" + py + "' cannot import " + modules};
  return {py, ""};
}

// Runs `command` (a shell command line, typically "'<python>' '<script>' args"), echoing its
// output prefixed by "  [<tag>] " without TensorFlow's start-up chatter; returns its exit status
// (-1 when it did not exit normally).
inline int run_interop_command(const std::string& command, const std::string& tag) {
  std::FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[1024];
  while (std::fgets(buf, sizeof buf, p)) {
    const std::string line = buf;
    if (line.rfind("I0000 ", 0) == 0 || line.rfind("WARNING: All log messages before absl", 0) == 0) continue;
    std::cout << "  [" << tag << "] " << line << std::flush;
  }
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline bool running_under_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

}  // namespace chorus::testing

// Sets `var` (a std::string) to the interop Python's path, or skips the test (outside CI) or
// fails it (CI=true) with the reason. Use in a TEST body or a fixture's SetUp.
#define CHORUS_REQUIRE_INTEROP_PYTHON(var, modules)                                                  \
  do {                                                                                               \
    const ::chorus::testing::InteropPython found_ = ::chorus::testing::find_interop_python(modules); \
    if (found_.path.empty()) {                                                                       \
      if (::chorus::testing::running_under_ci())                                                     \
        FAIL() << "interop test cannot run under CI=true: " << found_.why                            \
               << " (scripts/install-deps.sh --test makes the environment)";                         \
      GTEST_SKIP() << found_.why << "; enable with: scripts/install-deps.sh --test";                 \
    }                                                                                                \
    var = found_.path;                                                                               \
  } while (0)
