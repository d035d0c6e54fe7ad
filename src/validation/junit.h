// verify's reports as JUnit XML, the format GitLab, Jenkins and GitHub test reporters read.
#pragma once
#include <string>
#include <vector>

#include "src/validation/verify.h"

namespace attn {

// JUnit XML of one or more devices' reports (GitLab, Jenkins and GitHub reporters read it),
// written atomically.
void write_junit(const std::string& path, const std::vector<VerifyReport>& reports,
                 double total_seconds);

} // namespace attn
