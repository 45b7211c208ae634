// Validates an OpenAPI document with swagger-parser (every $ref resolved, the schema of OpenAPI
// 3.1 and its rules): prints "valid", or the parser's message and exits 1.
const SwaggerParser = require("@apidevtools/swagger-parser");

SwaggerParser.validate(process.argv[2]).then(
  () => console.log("valid"),
  (error) => {
    console.error(error.message);
    process.exit(1);
  },
);
