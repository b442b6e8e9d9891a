// expect_error.hpp — checks on the message of a failed Status.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

// EXPECT_ERROR_HAS(status, "part", ...): the status message contains every
// part (what failed, where, with what input: STYLE's error messages).
#define EXPECT_ERROR_HAS(status, ...)                                                \
  do {                                                                               \
    const std::string msg_ = (status).message();                                     \
    for (const std::string& part_ : std::initializer_list<std::string>{__VA_ARGS__}) \
      EXPECT_NE(msg_.find(part_), std::string::npos)                                 \
          << "message '" << msg_ << "' lacks '" << part_ << "'";                     \
  } while (0)
