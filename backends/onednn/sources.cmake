# The sources of CpuOneDnn's compiler, compiled partitions and payloads (all
# but backend.cpp), as absolute paths in
# CPUONEDNN_COMPILER_SOURCES. Included by this folder's CMakeLists.txt and by
# fuzz/, which builds them into the payload fuzzer.
set(CPUONEDNN_COMPILER_SOURCES compiler.cpp view_info.cpp support.cpp patterns.cpp fusion.cpp
    lowering.cpp lowering_data.cpp lowering_quant.cpp lowering_rnn.cpp plan_builder.cpp compiled.cpp
    payload.cpp shape_checks.cpp polymorphic.cpp derive.cpp impl_check.cpp)
list(TRANSFORM CPUONEDNN_COMPILER_SOURCES PREPEND ${CMAKE_CURRENT_LIST_DIR}/)
