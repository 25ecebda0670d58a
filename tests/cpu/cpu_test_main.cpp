// tests/cpu/cpu_test_main.cpp - Catch2 main for the host-only tests (run everywhere, CI included).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
