// tests/cli/cli_test_main.cpp - Catch2 main for the command-line tests (no GPU needed).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
