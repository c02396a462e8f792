import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.json.JsonConverter;

import io.apicurio.registry.utils.converter.AvroConverter;

/**
 * Decodes walbox's Avro records as a Kafka Connect sink would: with
 * Apicurio Registry's AvroConverter (toConnectData), against the registry
 * walbox registered the schemas in. The test e2e/debezium_avro_test.go runs
 * it (java WalboxAvroDecode.java REGISTRY_URL, the classpath of pom.xml
 * beside it): each stdin line is "topic hex-of-the-record-value", each
 * stdout line the Connect value as JSON (Connect's JsonConverter without
 * schemas), or "ERROR message". docs/schema-registry.md shows the two
 * methods between the markers as they stand.
 */
public class WalboxAvroDecode {
    // docs:begin
    // valueConverter returns the converter for walbox's record values, against
    // the registry walbox registered their schemas in (Apicurio's own API,
    // e.g. http://registry:8080/apis/registry/v2).
    static AvroConverter<Object> valueConverter(String registryURL) {
        AvroConverter<Object> converter = new AvroConverter<>();
        converter.configure(Map.of(
                "apicurio.registry.url", registryURL,
                // walbox writes Confluent's wire format: the magic byte 0,
                // then the 4-byte id the Confluent API answered (a content id)
                "apicurio.registry.as-confluent", "true",
                "apicurio.registry.use-id", "contentId",
                "apicurio.registry.headers.enabled", "false"),
                false); // false: values, not keys
        return converter;
    }

    // decode turns a record walbox sent into Kafka Connect's schema and value
    // (a Struct for an Avro record), as a sink connector receives it.
    static SchemaAndValue decode(AvroConverter<Object> converter, ConsumerRecord<byte[], byte[]> record) {
        return converter.toConnectData(record.topic(), record.headers(), record.value());
    }
    // docs:end

    public static void main(String[] args) throws Exception {
        AvroConverter<Object> converter = valueConverter(args[0]);
        JsonConverter json = new JsonConverter();
        json.configure(Map.of("schemas.enable", "false", "converter.type", "value"));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null;) {
            String[] parts = line.split(" ", 2);
            try {
                ConsumerRecord<byte[], byte[]> record = new ConsumerRecord<>(parts[0], 0, 0L, null, HexFormat.of().parseHex(parts[1]));
                SchemaAndValue sv = decode(converter, record);
                System.out.println(new String(json.fromConnectData(parts[0], sv.schema(), sv.value()), StandardCharsets.UTF_8));
            } catch (Exception e) {
                System.out.println("ERROR " + String.valueOf(e).replace('\n', ' '));
            }
            System.out.flush();
        }
    }
}
