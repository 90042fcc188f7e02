# embed.cmake -- write a C file defining one NUL-terminated char array per input text file
# (cmake -DOUT=file.c "-DINPUTS=name=path|name=path" -P embed.cmake).  The ahead-of-time
# generator (aot/aot.c, aot/gen_*.c) copies these texts into every file it writes.
set(body "/* written by cmake/embed.cmake from the files named below: do not edit */\n")
string(REPLACE "|" ";" INPUTS "${INPUTS}")
foreach(pair ${INPUTS})
  string(REPLACE "=" ";" kv "${pair}")
  list(GET kv 0 name)
  list(GET kv 1 path)
  file(READ "${path}" hex HEX)
  string(LENGTH "${hex}" n)
  # two hex digits a byte -> "0x.., " with a line break every 24 bytes
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "((0x..,){24})" "\\1\n" bytes "${bytes}")
  string(APPEND body "/* ${path} */\nconst unsigned char ${name}[] = {\n${bytes}0};\n")
endforeach()
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
